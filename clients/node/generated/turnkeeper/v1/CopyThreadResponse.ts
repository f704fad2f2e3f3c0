// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface CopyThreadResponse {
  'checkpointsCopied'?: (number);
}

export interface CopyThreadResponse__Output {
  'checkpointsCopied': (number);
}
