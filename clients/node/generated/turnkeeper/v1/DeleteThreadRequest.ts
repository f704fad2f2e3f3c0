// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface DeleteThreadRequest {
  'threadId'?: (string);
}

export interface DeleteThreadRequest__Output {
  'threadId': (string);
}
