// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { TurnState as _turnkeeper_v1_TurnState, TurnState__Output as _turnkeeper_v1_TurnState__Output } from '../../turnkeeper/v1/TurnState';
import type { Long } from '@grpc/proto-loader';

export interface TurnStatusResponse {
  'turnId'?: (string);
  'state'?: (_turnkeeper_v1_TurnState);
  'attempts'?: (number);
  'lastSeq'?: (number | string | Long);
  'error'?: (string);
  /**
   * As Turn.end_reason.
   */
  'endReason'?: (string);
}

export interface TurnStatusResponse__Output {
  'turnId': (string);
  'state': (_turnkeeper_v1_TurnState__Output);
  'attempts': (number);
  'lastSeq': (number);
  'error': (string);
  /**
   * As Turn.end_reason.
   */
  'endReason': (string);
}
