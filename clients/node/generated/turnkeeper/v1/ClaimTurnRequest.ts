// Original file: ../../protos/turnkeeper/v1/turns.proto


export interface ClaimTurnRequest {
  'turnId'?: (string);
  'attempt'?: (number);
  'replica'?: (string);
  'incarnation'?: (string);
}

export interface ClaimTurnRequest__Output {
  'turnId': (string);
  'attempt': (number);
  'replica': (string);
  'incarnation': (string);
}
