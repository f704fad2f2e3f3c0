// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Long } from '@grpc/proto-loader';

export interface ListEventsRequest {
  'turnId'?: (string);
  'afterSeq'?: (number | string | Long);
  /**
   * At most 1000; 0 means 1000.
   */
  'pageSize'?: (number);
}

export interface ListEventsRequest__Output {
  'turnId': (string);
  'afterSeq': (number);
  /**
   * At most 1000; 0 means 1000.
   */
  'pageSize': (number);
}
