// Original file: ../../protos/turnkeeper/v1/turns.proto


export interface HeartbeatRequest {
  'turnId'?: (string);
  'attempt'?: (number);
  'replica'?: (string);
  'incarnation'?: (string);
}

export interface HeartbeatRequest__Output {
  'turnId': (string);
  'attempt': (number);
  'replica': (string);
  'incarnation': (string);
}
