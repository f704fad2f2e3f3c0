// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Turn as _turnkeeper_v1_Turn, Turn__Output as _turnkeeper_v1_Turn__Output } from '../../turnkeeper/v1/Turn';
import type { Long } from '@grpc/proto-loader';

/**
 * One re-driven turn.
 */
export interface RedrivenTurn {
  'turn'?: (_turnkeeper_v1_Turn | null);
  /**
   * The checkpoint the new execution continues from; empty when the turn wrote
   * none, and the execution starts again from the journaled input.
   */
  'checkpointId'?: (string);
  /**
   * The boundary: retained events after it were deleted.
   */
  'rewindSeq'?: (number | string | Long);
  /**
   * True when the turn hit the re-drive cap and was marked FAILED instead.
   */
  'failedAtCap'?: (boolean);
}

/**
 * One re-driven turn.
 */
export interface RedrivenTurn__Output {
  'turn': (_turnkeeper_v1_Turn__Output | null);
  /**
   * The checkpoint the new execution continues from; empty when the turn wrote
   * none, and the execution starts again from the journaled input.
   */
  'checkpointId': (string);
  /**
   * The boundary: retained events after it were deleted.
   */
  'rewindSeq': (number);
  /**
   * True when the turn hit the re-drive cap and was marked FAILED instead.
   */
  'failedAtCap': (boolean);
}
