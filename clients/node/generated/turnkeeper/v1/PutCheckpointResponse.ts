// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { CheckpointRef as _turnkeeper_v1_CheckpointRef, CheckpointRef__Output as _turnkeeper_v1_CheckpointRef__Output } from '../../turnkeeper/v1/CheckpointRef';

export interface PutCheckpointResponse {
  'ref'?: (_turnkeeper_v1_CheckpointRef | null);
}

export interface PutCheckpointResponse__Output {
  'ref': (_turnkeeper_v1_CheckpointRef__Output | null);
}
