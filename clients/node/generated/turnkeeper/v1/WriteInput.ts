// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type { TypedValue as _turnkeeper_v1_TypedValue, TypedValue__Output as _turnkeeper_v1_TypedValue__Output } from '../../turnkeeper/v1/TypedValue';

export interface WriteInput {
  /**
   * SqliteSaver's index: WRITES_IDX_MAP for special channels, else the position.
   */
  'idx'?: (number);
  'channel'?: (string);
  'value'?: (_turnkeeper_v1_TypedValue | null);
}

export interface WriteInput__Output {
  /**
   * SqliteSaver's index: WRITES_IDX_MAP for special channels, else the position.
   */
  'idx': (number);
  'channel': (string);
  'value': (_turnkeeper_v1_TypedValue__Output | null);
}
