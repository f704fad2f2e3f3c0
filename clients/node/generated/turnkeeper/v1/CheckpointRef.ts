// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface CheckpointRef {
  'threadId'?: (string);
  'checkpointNs'?: (string);
  'checkpointId'?: (string);
}

export interface CheckpointRef__Output {
  'threadId': (string);
  'checkpointNs': (string);
  'checkpointId': (string);
}
