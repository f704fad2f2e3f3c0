// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface GetCheckpointRequest {
  'threadId'?: (string);
  'checkpointNs'?: (string);
  /**
   * Empty: the newest checkpoint of the thread in the namespace.
   */
  'checkpointId'?: (string);
}

export interface GetCheckpointRequest__Output {
  'threadId': (string);
  'checkpointNs': (string);
  /**
   * Empty: the newest checkpoint of the thread in the namespace.
   */
  'checkpointId': (string);
}
