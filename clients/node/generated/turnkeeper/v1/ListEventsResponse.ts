// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Event as _turnkeeper_v1_Event, Event__Output as _turnkeeper_v1_Event__Output } from '../../turnkeeper/v1/Event';
import type { Long } from '@grpc/proto-loader';

export interface ListEventsResponse {
  'events'?: (_turnkeeper_v1_Event)[];
  'lastSeq'?: (number | string | Long);
}

export interface ListEventsResponse__Output {
  'events': (_turnkeeper_v1_Event__Output)[];
  'lastSeq': (number);
}
