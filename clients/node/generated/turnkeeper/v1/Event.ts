// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from '../../google/protobuf/Timestamp';
import type { Long } from '@grpc/proto-loader';

export interface Event {
  'seq'?: (number | string | Long);
  /**
   * The attempt of the execution that wrote it.
   */
  'attempt'?: (number);
  /**
   * token, tool_call_start, tool_call_end, step, interrupt, final, error,
   * turn.done, turn.failed ...
   */
  'type'?: (string);
  /**
   * JSON text.
   */
  'dataJson'?: (string);
  'createdAt'?: (_google_protobuf_Timestamp | null);
}

export interface Event__Output {
  'seq': (number);
  /**
   * The attempt of the execution that wrote it.
   */
  'attempt': (number);
  /**
   * token, tool_call_start, tool_call_end, step, interrupt, final, error,
   * turn.done, turn.failed ...
   */
  'type': (string);
  /**
   * JSON text.
   */
  'dataJson': (string);
  'createdAt': (_google_protobuf_Timestamp__Output | null);
}
