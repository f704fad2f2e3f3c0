// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Turn as _turnkeeper_v1_Turn, Turn__Output as _turnkeeper_v1_Turn__Output } from '../../turnkeeper/v1/Turn';

export interface StartTurnResponse {
  'turn'?: (_turnkeeper_v1_Turn | null);
  /**
   * False when an identical StartTurn had already journaled the turn.
   */
  'created'?: (boolean);
  /**
   * The live turn that MULTITASK_STRATEGY_INTERRUPT or ROLLBACK cancelled; empty if none.
   */
  'cancelledTurnId'?: (string);
}

export interface StartTurnResponse__Output {
  'turn': (_turnkeeper_v1_Turn__Output | null);
  /**
   * False when an identical StartTurn had already journaled the turn.
   */
  'created': (boolean);
  /**
   * The live turn that MULTITASK_STRATEGY_INTERRUPT or ROLLBACK cancelled; empty if none.
   */
  'cancelledTurnId': (string);
}
