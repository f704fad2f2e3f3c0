// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Turn as _turnkeeper_v1_Turn, Turn__Output as _turnkeeper_v1_Turn__Output } from '../../turnkeeper/v1/Turn';

export interface ListTurnsResponse {
  'turns'?: (_turnkeeper_v1_Turn)[];
  /**
   * Empty on the last page.
   */
  'nextPageToken'?: (string);
}

export interface ListTurnsResponse__Output {
  'turns': (_turnkeeper_v1_Turn__Output)[];
  /**
   * Empty on the last page.
   */
  'nextPageToken': (string);
}
