// Original file: ../../protos/turnkeeper/v1/turns.proto


export interface GetTurnRequest {
  'turnId'?: (string);
}

export interface GetTurnRequest__Output {
  'turnId': (string);
}
