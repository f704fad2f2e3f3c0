// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { GetCheckpointRequest as _turnkeeper_v1_GetCheckpointRequest, GetCheckpointRequest__Output as _turnkeeper_v1_GetCheckpointRequest__Output } from '../../turnkeeper/v1/GetCheckpointRequest';
import type { PutCheckpointRequest as _turnkeeper_v1_PutCheckpointRequest, PutCheckpointRequest__Output as _turnkeeper_v1_PutCheckpointRequest__Output } from '../../turnkeeper/v1/PutCheckpointRequest';
import type { PutWritesRequest as _turnkeeper_v1_PutWritesRequest, PutWritesRequest__Output as _turnkeeper_v1_PutWritesRequest__Output } from '../../turnkeeper/v1/PutWritesRequest';
import type { AppendEventsRequest as _turnkeeper_v1_AppendEventsRequest, AppendEventsRequest__Output as _turnkeeper_v1_AppendEventsRequest__Output } from '../../turnkeeper/v1/AppendEventsRequest';
import type { Long } from '@grpc/proto-loader';

export interface CheckpointStreamRequest {
  /**
   * Chosen by the client, echoed in the response; unique among its open requests.
   */
  'id'?: (number | string | Long);
  'get'?: (_turnkeeper_v1_GetCheckpointRequest | null);
  'put'?: (_turnkeeper_v1_PutCheckpointRequest | null);
  'writes'?: (_turnkeeper_v1_PutWritesRequest | null);
  'append'?: (_turnkeeper_v1_AppendEventsRequest | null);
  'op'?: "get"|"put"|"writes"|"append";
}

export interface CheckpointStreamRequest__Output {
  /**
   * Chosen by the client, echoed in the response; unique among its open requests.
   */
  'id': (number);
  'get'?: (_turnkeeper_v1_GetCheckpointRequest__Output | null);
  'put'?: (_turnkeeper_v1_PutCheckpointRequest__Output | null);
  'writes'?: (_turnkeeper_v1_PutWritesRequest__Output | null);
  'append'?: (_turnkeeper_v1_AppendEventsRequest__Output | null);
  'op'?: "get"|"put"|"writes"|"append";
}
