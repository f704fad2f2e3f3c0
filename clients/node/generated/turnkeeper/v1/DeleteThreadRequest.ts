// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface DeleteThreadRequest {
  'threadId'?: (string);
  /**
   * Cancel the thread's live turn first, in the same transaction; without it a
   * thread with a live turn is refused (FAILED_PRECONDITION).
   */
  'cancel'?: (boolean);
}

export interface DeleteThreadRequest__Output {
  'threadId': (string);
  /**
   * Cancel the thread's live turn first, in the same transaction; without it a
   * thread with a live turn is refused (FAILED_PRECONDITION).
   */
  'cancel': (boolean);
}
