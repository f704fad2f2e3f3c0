// Original file: ../../protos/turnkeeper/v1/turns.proto

export const Outcome = {
  OUTCOME_UNSPECIFIED: 'OUTCOME_UNSPECIFIED',
  OUTCOME_DONE: 'OUTCOME_DONE',
  OUTCOME_FAILED: 'OUTCOME_FAILED',
} as const;

export type Outcome =
  | 'OUTCOME_UNSPECIFIED'
  | 0
  | 'OUTCOME_DONE'
  | 1
  | 'OUTCOME_FAILED'
  | 2

export type Outcome__Output = typeof Outcome[keyof typeof Outcome]
