// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Long } from '@grpc/proto-loader';

export interface WatchTurnRequest {
  'turnId'?: (string);
  'afterSeq'?: (number | string | Long);
}

export interface WatchTurnRequest__Output {
  'turnId': (string);
  'afterSeq': (number);
}
