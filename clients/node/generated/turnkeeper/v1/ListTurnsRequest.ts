// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { TurnState as _turnkeeper_v1_TurnState, TurnState__Output as _turnkeeper_v1_TurnState__Output } from '../../turnkeeper/v1/TurnState';

export interface ListTurnsRequest {
  /**
   * Unset or UNSPECIFIED: any state.
   */
  'state'?: (_turnkeeper_v1_TurnState);
  'agent'?: (string);
  'threadId'?: (string);
  /**
   * At most 1000; 0 means 100.
   */
  'pageSize'?: (number);
  'pageToken'?: (string);
}

export interface ListTurnsRequest__Output {
  /**
   * Unset or UNSPECIFIED: any state.
   */
  'state': (_turnkeeper_v1_TurnState__Output);
  'agent': (string);
  'threadId': (string);
  /**
   * At most 1000; 0 means 100.
   */
  'pageSize': (number);
  'pageToken': (string);
}
