// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Turn as _turnkeeper_v1_Turn, Turn__Output as _turnkeeper_v1_Turn__Output } from '../../turnkeeper/v1/Turn';

export interface CancelTurnResponse {
  'turn'?: (_turnkeeper_v1_Turn | null);
  /**
   * How many checkpoints rollback removed.
   */
  'checkpointsRemoved'?: (number);
}

export interface CancelTurnResponse__Output {
  'turn': (_turnkeeper_v1_Turn__Output | null);
  /**
   * How many checkpoints rollback removed.
   */
  'checkpointsRemoved': (number);
}
