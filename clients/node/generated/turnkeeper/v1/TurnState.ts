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
  /**
   * Terminal: stopped by CancelTurn, a double-texting interrupt or rollback, or
   * DeleteThread with cancel.
   */
  TURN_STATE_CANCELLED: 'TURN_STATE_CANCELLED',
  /**
   * Waiting behind the thread's live turn (StartTurn with MULTITASK_STRATEGY_ENQUEUE);
   * starts, in order, when the turns before it have ended.
   */
  TURN_STATE_QUEUED: 'TURN_STATE_QUEUED',
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
  /**
   * Terminal: stopped by CancelTurn, a double-texting interrupt or rollback, or
   * DeleteThread with cancel.
   */
  | 'TURN_STATE_CANCELLED'
  | 6
  /**
   * Waiting behind the thread's live turn (StartTurn with MULTITASK_STRATEGY_ENQUEUE);
   * starts, in order, when the turns before it have ended.
   */
  | 'TURN_STATE_QUEUED'
  | 7

export type TurnState__Output = typeof TurnState[keyof typeof TurnState]
