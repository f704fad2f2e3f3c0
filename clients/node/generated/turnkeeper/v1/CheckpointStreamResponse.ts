// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { GetCheckpointResponse as _turnkeeper_v1_GetCheckpointResponse, GetCheckpointResponse__Output as _turnkeeper_v1_GetCheckpointResponse__Output } from '../../turnkeeper/v1/GetCheckpointResponse';
import type { PutCheckpointResponse as _turnkeeper_v1_PutCheckpointResponse, PutCheckpointResponse__Output as _turnkeeper_v1_PutCheckpointResponse__Output } from '../../turnkeeper/v1/PutCheckpointResponse';
import type { PutWritesResponse as _turnkeeper_v1_PutWritesResponse, PutWritesResponse__Output as _turnkeeper_v1_PutWritesResponse__Output } from '../../turnkeeper/v1/PutWritesResponse';
import type { AppendEventsResponse as _turnkeeper_v1_AppendEventsResponse, AppendEventsResponse__Output as _turnkeeper_v1_AppendEventsResponse__Output } from '../../turnkeeper/v1/AppendEventsResponse';
import type { StreamError as _turnkeeper_v1_StreamError, StreamError__Output as _turnkeeper_v1_StreamError__Output } from '../../turnkeeper/v1/StreamError';
import type { Long } from '@grpc/proto-loader';

export interface CheckpointStreamResponse {
  'id'?: (number | string | Long);
  'get'?: (_turnkeeper_v1_GetCheckpointResponse | null);
  'put'?: (_turnkeeper_v1_PutCheckpointResponse | null);
  'writes'?: (_turnkeeper_v1_PutWritesResponse | null);
  'append'?: (_turnkeeper_v1_AppendEventsResponse | null);
  'error'?: (_turnkeeper_v1_StreamError | null);
  'result'?: "get"|"put"|"writes"|"append"|"error";
}

export interface CheckpointStreamResponse__Output {
  'id': (number);
  'get'?: (_turnkeeper_v1_GetCheckpointResponse__Output | null);
  'put'?: (_turnkeeper_v1_PutCheckpointResponse__Output | null);
  'writes'?: (_turnkeeper_v1_PutWritesResponse__Output | null);
  'append'?: (_turnkeeper_v1_AppendEventsResponse__Output | null);
  'error'?: (_turnkeeper_v1_StreamError__Output | null);
  'result'?: "get"|"put"|"writes"|"append"|"error";
}
