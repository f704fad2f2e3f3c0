// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Event as _turnkeeper_v1_Event, Event__Output as _turnkeeper_v1_Event__Output } from '../../turnkeeper/v1/Event';
import type { Reset as _turnkeeper_v1_Reset, Reset__Output as _turnkeeper_v1_Reset__Output } from '../../turnkeeper/v1/Reset';

export interface WatchTurnResponse {
  'event'?: (_turnkeeper_v1_Event | null);
  'reset'?: (_turnkeeper_v1_Reset | null);
  'frame'?: "event"|"reset";
}

export interface WatchTurnResponse__Output {
  'event'?: (_turnkeeper_v1_Event__Output | null);
  'reset'?: (_turnkeeper_v1_Reset__Output | null);
  'frame'?: "event"|"reset";
}
