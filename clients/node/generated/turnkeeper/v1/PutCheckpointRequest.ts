// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { TypedValue as _turnkeeper_v1_TypedValue, TypedValue__Output as _turnkeeper_v1_TypedValue__Output } from '../../turnkeeper/v1/TypedValue';
import type { TurnFence as _turnkeeper_v1_TurnFence, TurnFence__Output as _turnkeeper_v1_TurnFence__Output } from '../../turnkeeper/v1/TurnFence';

export interface PutCheckpointRequest {
  'threadId'?: (string);
  'checkpointNs'?: (string);
  'checkpointId'?: (string);
  'parentCheckpointId'?: (string);
  'checkpoint'?: (_turnkeeper_v1_TypedValue | null);
  /**
   * The merged metadata as JSON text.
   */
  'metadataJson'?: (string);
  'fence'?: (_turnkeeper_v1_TurnFence | null);
}

export interface PutCheckpointRequest__Output {
  'threadId': (string);
  'checkpointNs': (string);
  'checkpointId': (string);
  'parentCheckpointId': (string);
  'checkpoint': (_turnkeeper_v1_TypedValue__Output | null);
  /**
   * The merged metadata as JSON text.
   */
  'metadataJson': (string);
  'fence': (_turnkeeper_v1_TurnFence__Output | null);
}
