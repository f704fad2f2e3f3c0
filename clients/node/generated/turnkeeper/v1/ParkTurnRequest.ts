// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Value as _google_protobuf_Value, Value__Output as _google_protobuf_Value__Output } from '../../google/protobuf/Value';
import type { EventInput as _turnkeeper_v1_EventInput, EventInput__Output as _turnkeeper_v1_EventInput__Output } from '../../turnkeeper/v1/EventInput';

export interface ParkTurnRequest {
  'turnId'?: (string);
  'attempt'?: (number);
  'interrupt'?: (_google_protobuf_Value | null);
  /**
   * Appended in the same transaction, before the turn parks.
   */
  'events'?: (_turnkeeper_v1_EventInput)[];
}

export interface ParkTurnRequest__Output {
  'turnId': (string);
  'attempt': (number);
  'interrupt': (_google_protobuf_Value__Output | null);
  /**
   * Appended in the same transaction, before the turn parks.
   */
  'events': (_turnkeeper_v1_EventInput__Output)[];
}
