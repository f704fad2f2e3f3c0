// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Long } from '@grpc/proto-loader';

/**
 * An event as an executor writes it.
 */
export interface EventInput {
  'seq'?: (number | string | Long);
  'type'?: (string);
  'dataJson'?: (string);
}

/**
 * An event as an executor writes it.
 */
export interface EventInput__Output {
  'seq': (number);
  'type': (string);
  'dataJson': (string);
}
