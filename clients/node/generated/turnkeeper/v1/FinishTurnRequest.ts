// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Outcome as _turnkeeper_v1_Outcome, Outcome__Output as _turnkeeper_v1_Outcome__Output } from '../../turnkeeper/v1/Outcome';
import type { EventInput as _turnkeeper_v1_EventInput, EventInput__Output as _turnkeeper_v1_EventInput__Output } from '../../turnkeeper/v1/EventInput';

export interface FinishTurnRequest {
  'turnId'?: (string);
  'attempt'?: (number);
  'outcome'?: (_turnkeeper_v1_Outcome);
  /**
   * Required with OUTCOME_FAILED.
   */
  'error'?: (string);
  /**
   * Appended in the same transaction, before the terminal event.
   */
  'events'?: (_turnkeeper_v1_EventInput)[];
}

export interface FinishTurnRequest__Output {
  'turnId': (string);
  'attempt': (number);
  'outcome': (_turnkeeper_v1_Outcome__Output);
  /**
   * Required with OUTCOME_FAILED.
   */
  'error': (string);
  /**
   * Appended in the same transaction, before the terminal event.
   */
  'events': (_turnkeeper_v1_EventInput__Output)[];
}
