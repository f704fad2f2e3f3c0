// Original file: ../../protos/turnkeeper/v1/turns.proto


export interface TurnStatusRequest {
  'turnId'?: (string);
}

export interface TurnStatusRequest__Output {
  'turnId': (string);
}
