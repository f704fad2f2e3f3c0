// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface ListCheckpointsRequest {
  /**
   * Empty: every thread.
   */
  'threadId'?: (string);
  /**
   * Unset: every namespace.
   */
  'checkpointNs'?: (string);
  'checkpointId'?: (string);
  /**
   * Metadata filter as a JSON object, matched key by key.
   */
  'filterJson'?: (string);
  /**
   * Only checkpoints older than this id.
   */
  'beforeCheckpointId'?: (string);
  /**
   * 0: no limit.
   */
  'limit'?: (number);
  '_checkpointNs'?: "checkpointNs";
}

export interface ListCheckpointsRequest__Output {
  /**
   * Empty: every thread.
   */
  'threadId': (string);
  /**
   * Unset: every namespace.
   */
  'checkpointNs'?: (string);
  'checkpointId': (string);
  /**
   * Metadata filter as a JSON object, matched key by key.
   */
  'filterJson': (string);
  /**
   * Only checkpoints older than this id.
   */
  'beforeCheckpointId': (string);
  /**
   * 0: no limit.
   */
  'limit': (number);
  '_checkpointNs'?: "checkpointNs";
}
