// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { Turn as _turnkeeper_v1_Turn, Turn__Output as _turnkeeper_v1_Turn__Output } from '../../turnkeeper/v1/Turn';

export interface GetTurnResponse {
  'turn'?: (_turnkeeper_v1_Turn | null);
}

export interface GetTurnResponse__Output {
  'turn': (_turnkeeper_v1_Turn__Output | null);
}
