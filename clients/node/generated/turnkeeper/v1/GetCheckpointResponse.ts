// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { CheckpointTuple as _turnkeeper_v1_CheckpointTuple, CheckpointTuple__Output as _turnkeeper_v1_CheckpointTuple__Output } from '../../turnkeeper/v1/CheckpointTuple';

export interface GetCheckpointResponse {
  'found'?: (boolean);
  'checkpoint'?: (_turnkeeper_v1_CheckpointTuple | null);
}

export interface GetCheckpointResponse__Output {
  'found': (boolean);
  'checkpoint': (_turnkeeper_v1_CheckpointTuple__Output | null);
}
