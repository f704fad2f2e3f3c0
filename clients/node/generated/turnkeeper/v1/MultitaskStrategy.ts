// Original file: ../../protos/turnkeeper/v1/turns.proto

/**
 * What StartTurn does when the thread already has a live (RUNNING or PARKED) turn,
 * with LangGraph Platform's names.
 */
export const MultitaskStrategy = {
  /**
   * The same as REJECT.
   */
  MULTITASK_STRATEGY_UNSPECIFIED: 'MULTITASK_STRATEGY_UNSPECIFIED',
  /**
   * FAILED_PRECONDITION: the caller waits for the live turn to end.
   */
  MULTITASK_STRATEGY_REJECT: 'MULTITASK_STRATEGY_REJECT',
  /**
   * The new turn is journaled QUEUED and starts when the turns before it ended.
   */
  MULTITASK_STRATEGY_ENQUEUE: 'MULTITASK_STRATEGY_ENQUEUE',
  /**
   * The live turn is cancelled (its checkpoints kept), the new one starts.
   */
  MULTITASK_STRATEGY_INTERRUPT: 'MULTITASK_STRATEGY_INTERRUPT',
  /**
   * The live turn is cancelled and the checkpoints it wrote removed; the new one starts.
   */
  MULTITASK_STRATEGY_ROLLBACK: 'MULTITASK_STRATEGY_ROLLBACK',
} as const;

/**
 * What StartTurn does when the thread already has a live (RUNNING or PARKED) turn,
 * with LangGraph Platform's names.
 */
export type MultitaskStrategy =
  /**
   * The same as REJECT.
   */
  | 'MULTITASK_STRATEGY_UNSPECIFIED'
  | 0
  /**
   * FAILED_PRECONDITION: the caller waits for the live turn to end.
   */
  | 'MULTITASK_STRATEGY_REJECT'
  | 1
  /**
   * The new turn is journaled QUEUED and starts when the turns before it ended.
   */
  | 'MULTITASK_STRATEGY_ENQUEUE'
  | 2
  /**
   * The live turn is cancelled (its checkpoints kept), the new one starts.
   */
  | 'MULTITASK_STRATEGY_INTERRUPT'
  | 3
  /**
   * The live turn is cancelled and the checkpoints it wrote removed; the new one starts.
   */
  | 'MULTITASK_STRATEGY_ROLLBACK'
  | 4

/**
 * What StartTurn does when the thread already has a live (RUNNING or PARKED) turn,
 * with LangGraph Platform's names.
 */
export type MultitaskStrategy__Output = typeof MultitaskStrategy[keyof typeof MultitaskStrategy]
