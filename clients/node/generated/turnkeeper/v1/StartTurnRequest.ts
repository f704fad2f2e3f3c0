// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Value as _google_protobuf_Value, Value__Output as _google_protobuf_Value__Output } from '../../google/protobuf/Value';

export interface StartTurnRequest {
  'turnId'?: (string);
  'threadId'?: (string);
  'agent'?: (string);
  'input'?: (_google_protobuf_Value | null);
  'replica'?: (string);
  'incarnation'?: (string);
}

export interface StartTurnRequest__Output {
  'turnId': (string);
  'threadId': (string);
  'agent': (string);
  'input': (_google_protobuf_Value__Output | null);
  'replica': (string);
  'incarnation': (string);
}
