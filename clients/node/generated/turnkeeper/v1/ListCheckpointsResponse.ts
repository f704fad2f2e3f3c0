// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { CheckpointTuple as _turnkeeper_v1_CheckpointTuple, CheckpointTuple__Output as _turnkeeper_v1_CheckpointTuple__Output } from '../../turnkeeper/v1/CheckpointTuple';

/**
 * One checkpoint of the listing.
 */
export interface ListCheckpointsResponse {
  'checkpoint'?: (_turnkeeper_v1_CheckpointTuple | null);
}

/**
 * One checkpoint of the listing.
 */
export interface ListCheckpointsResponse__Output {
  'checkpoint': (_turnkeeper_v1_CheckpointTuple__Output | null);
}
