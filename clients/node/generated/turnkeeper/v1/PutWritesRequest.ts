// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { WriteInput as _turnkeeper_v1_WriteInput, WriteInput__Output as _turnkeeper_v1_WriteInput__Output } from '../../turnkeeper/v1/WriteInput';
import type { TurnFence as _turnkeeper_v1_TurnFence, TurnFence__Output as _turnkeeper_v1_TurnFence__Output } from '../../turnkeeper/v1/TurnFence';

export interface PutWritesRequest {
  'threadId'?: (string);
  'checkpointNs'?: (string);
  'checkpointId'?: (string);
  'taskId'?: (string);
  'taskPath'?: (string);
  'writes'?: (_turnkeeper_v1_WriteInput)[];
  /**
   * Replace existing rows (every channel is a special one) instead of keeping them.
   */
  'replace'?: (boolean);
  'fence'?: (_turnkeeper_v1_TurnFence | null);
}

export interface PutWritesRequest__Output {
  'threadId': (string);
  'checkpointNs': (string);
  'checkpointId': (string);
  'taskId': (string);
  'taskPath': (string);
  'writes': (_turnkeeper_v1_WriteInput__Output)[];
  /**
   * Replace existing rows (every channel is a special one) instead of keeping them.
   */
  'replace': (boolean);
  'fence': (_turnkeeper_v1_TurnFence__Output | null);
}
