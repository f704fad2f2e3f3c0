// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Value as _google_protobuf_Value, Value__Output as _google_protobuf_Value__Output } from '../../google/protobuf/Value';

export interface ResumeDetachedRequest {
  'turnId'?: (string);
  'resume'?: (_google_protobuf_Value | null);
}

export interface ResumeDetachedRequest__Output {
  'turnId': (string);
  'resume': (_google_protobuf_Value__Output | null);
}
