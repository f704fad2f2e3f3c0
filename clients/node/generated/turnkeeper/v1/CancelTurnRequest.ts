// Original file: ../../protos/turnkeeper/v1/turns.proto


export interface CancelTurnRequest {
  'turnId'?: (string);
  /**
   * Also remove the checkpoints the turn wrote, so the thread is as it was
   * before the turn started.
   */
  'rollback'?: (boolean);
  /**
   * Free text for people, stored with the terminal event; at most 1000 bytes.
   */
  'reason'?: (string);
}

export interface CancelTurnRequest__Output {
  'turnId': (string);
  /**
   * Also remove the checkpoints the turn wrote, so the thread is as it was
   * before the turn started.
   */
  'rollback': (boolean);
  /**
   * Free text for people, stored with the terminal event; at most 1000 bytes.
   */
  'reason': (string);
}
