// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Long } from '@grpc/proto-loader';

export interface AppendEventsResponse {
  'lastSeq'?: (number | string | Long);
}

export interface AppendEventsResponse__Output {
  'lastSeq': (number);
}
