// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { EventInput as _turnkeeper_v1_EventInput, EventInput__Output as _turnkeeper_v1_EventInput__Output } from '../../turnkeeper/v1/EventInput';

export interface AppendEventsRequest {
  'turnId'?: (string);
  'attempt'?: (number);
  'events'?: (_turnkeeper_v1_EventInput)[];
}

export interface AppendEventsRequest__Output {
  'turnId': (string);
  'attempt': (number);
  'events': (_turnkeeper_v1_EventInput__Output)[];
}
