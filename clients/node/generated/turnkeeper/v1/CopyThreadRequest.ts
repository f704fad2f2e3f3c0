// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface CopyThreadRequest {
  'sourceThreadId'?: (string);
  'targetThreadId'?: (string);
}

export interface CopyThreadRequest__Output {
  'sourceThreadId': (string);
  'targetThreadId': (string);
}
