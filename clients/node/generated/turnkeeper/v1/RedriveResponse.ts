// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { RedrivenTurn as _turnkeeper_v1_RedrivenTurn, RedrivenTurn__Output as _turnkeeper_v1_RedrivenTurn__Output } from '../../turnkeeper/v1/RedrivenTurn';

export interface RedriveResponse {
  'turns'?: (_turnkeeper_v1_RedrivenTurn)[];
  /**
   * Operator form: true when a live replica acknowledged the hand-off.
   */
  'dispatched'?: (boolean);
}

export interface RedriveResponse__Output {
  'turns': (_turnkeeper_v1_RedrivenTurn__Output)[];
  /**
   * Operator form: true when a live replica acknowledged the hand-off.
   */
  'dispatched': (boolean);
}
