// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Turn as _turnkeeper_v1_Turn, Turn__Output as _turnkeeper_v1_Turn__Output } from '../../turnkeeper/v1/Turn';

export interface ResumeDetachedResponse {
  'turn'?: (_turnkeeper_v1_Turn | null);
  /**
   * True when a live replica acknowledged the hand-off; otherwise the turn waits,
   * RUNNING without an owner, for the lease reaper to hand it out.
   */
  'dispatched'?: (boolean);
}

export interface ResumeDetachedResponse__Output {
  'turn': (_turnkeeper_v1_Turn__Output | null);
  /**
   * True when a live replica acknowledged the hand-off; otherwise the turn waits,
   * RUNNING without an owner, for the lease reaper to hand it out.
   */
  'dispatched': (boolean);
}
