// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from '../../google/protobuf/Timestamp';

/**
 * The executor that owns a RUNNING turn.
 */
export interface Owner {
  /**
   * Stable across restarts of the agent process (container hostname by default).
   */
  'replica'?: (string);
  /**
   * New at every process start.
   */
  'incarnation'?: (string);
  'leaseExpiresAt'?: (_google_protobuf_Timestamp | null);
}

/**
 * The executor that owns a RUNNING turn.
 */
export interface Owner__Output {
  /**
   * Stable across restarts of the agent process (container hostname by default).
   */
  'replica': (string);
  /**
   * New at every process start.
   */
  'incarnation': (string);
  'leaseExpiresAt': (_google_protobuf_Timestamp__Output | null);
}
