// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { TypedValue as _turnkeeper_v1_TypedValue, TypedValue__Output as _turnkeeper_v1_TypedValue__Output } from '../../turnkeeper/v1/TypedValue';

export interface PendingWrite {
  'taskId'?: (string);
  'channel'?: (string);
  'value'?: (_turnkeeper_v1_TypedValue | null);
  'taskPath'?: (string);
  'idx'?: (number);
}

export interface PendingWrite__Output {
  'taskId': (string);
  'channel': (string);
  'value': (_turnkeeper_v1_TypedValue__Output | null);
  'taskPath': (string);
  'idx': (number);
}
