// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from '../../google/protobuf/Timestamp';

export interface HeartbeatResponse {
  'leaseExpiresAt'?: (_google_protobuf_Timestamp | null);
}

export interface HeartbeatResponse__Output {
  'leaseExpiresAt': (_google_protobuf_Timestamp__Output | null);
}
