// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Value as _google_protobuf_Value, Value__Output as _google_protobuf_Value__Output } from '../../google/protobuf/Value';
import type { MultitaskStrategy as _turnkeeper_v1_MultitaskStrategy, MultitaskStrategy__Output as _turnkeeper_v1_MultitaskStrategy__Output } from '../../turnkeeper/v1/MultitaskStrategy';
import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';

export interface StartTurnRequest {
  'turnId'?: (string);
  'threadId'?: (string);
  'agent'?: (string);
  'input'?: (_google_protobuf_Value | null);
  'replica'?: (string);
  'incarnation'?: (string);
  /**
   * What to do when the thread has a live turn; unset: reject.
   */
  'multitaskStrategy'?: (_turnkeeper_v1_MultitaskStrategy);
  /**
   * The longest the turn may stay RUNNING between a start or resume and its next
   * park or end; unset or zero: the service's default (serve --max-run-time).
   */
  'maxRunTime'?: (_google_protobuf_Duration | null);
  /**
   * The longest the turn may stay PARKED; unset or zero: the service's default
   * (serve --park-expiry).
   */
  'parkExpiry'?: (_google_protobuf_Duration | null);
}

export interface StartTurnRequest__Output {
  'turnId': (string);
  'threadId': (string);
  'agent': (string);
  'input': (_google_protobuf_Value__Output | null);
  'replica': (string);
  'incarnation': (string);
  /**
   * What to do when the thread has a live turn; unset: reject.
   */
  'multitaskStrategy': (_turnkeeper_v1_MultitaskStrategy__Output);
  /**
   * The longest the turn may stay RUNNING between a start or resume and its next
   * park or end; unset or zero: the service's default (serve --max-run-time).
   */
  'maxRunTime': (_google_protobuf_Duration__Output | null);
  /**
   * The longest the turn may stay PARKED; unset or zero: the service's default
   * (serve --park-expiry).
   */
  'parkExpiry': (_google_protobuf_Duration__Output | null);
}
