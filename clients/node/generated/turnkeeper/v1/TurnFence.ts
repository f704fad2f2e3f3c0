// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


/**
 * The turn a write belongs to, for fencing and boundaries.
 */
export interface TurnFence {
  'turnId'?: (string);
  'attempt'?: (number);
}

/**
 * The turn a write belongs to, for fencing and boundaries.
 */
export interface TurnFence__Output {
  'turnId': (string);
  'attempt': (number);
}
