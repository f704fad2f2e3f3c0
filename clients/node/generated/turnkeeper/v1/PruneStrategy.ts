// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

export const PruneStrategy = {
  /**
   * The same as KEEP_LATEST.
   */
  PRUNE_STRATEGY_UNSPECIFIED: 'PRUNE_STRATEGY_UNSPECIFIED',
  PRUNE_STRATEGY_KEEP_LATEST: 'PRUNE_STRATEGY_KEEP_LATEST',
  PRUNE_STRATEGY_DELETE: 'PRUNE_STRATEGY_DELETE',
} as const;

export type PruneStrategy =
  /**
   * The same as KEEP_LATEST.
   */
  | 'PRUNE_STRATEGY_UNSPECIFIED'
  | 0
  | 'PRUNE_STRATEGY_KEEP_LATEST'
  | 1
  | 'PRUNE_STRATEGY_DELETE'
  | 2

export type PruneStrategy__Output = typeof PruneStrategy[keyof typeof PruneStrategy]
