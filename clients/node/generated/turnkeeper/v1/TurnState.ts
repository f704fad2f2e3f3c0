// Original file: ../../protos/turnkeeper/v1/turns.proto

export const TurnState = {
  TURN_STATE_UNSPECIFIED: 'TURN_STATE_UNSPECIFIED',
  TURN_STATE_RUNNING: 'TURN_STATE_RUNNING',
  TURN_STATE_PARKED: 'TURN_STATE_PARKED',
  TURN_STATE_DONE: 'TURN_STATE_DONE',
  TURN_STATE_FAILED: 'TURN_STATE_FAILED',
  /**
   * Only in TurnStatusResponse: the journal never saw this turn_id.
   */
  TURN_STATE_UNKNOWN: 'TURN_STATE_UNKNOWN',
} as const;

export type TurnState =
  | 'TURN_STATE_UNSPECIFIED'
  | 0
  | 'TURN_STATE_RUNNING'
  | 1
  | 'TURN_STATE_PARKED'
  | 2
  | 'TURN_STATE_DONE'
  | 3
  | 'TURN_STATE_FAILED'
  | 4
  /**
   * Only in TurnStatusResponse: the journal never saw this turn_id.
   */
  | 'TURN_STATE_UNKNOWN'
  | 5

export type TurnState__Output = typeof TurnState[keyof typeof TurnState]
