// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface DeleteThreadResponse {
  /**
   * The turns erased with the thread (their inputs, events and outbox rows too).
   */
  'turnsDeleted'?: (number);
  /**
   * The live turn cancelled first (cancel set); empty if none.
   */
  'cancelledTurnId'?: (string);
}

export interface DeleteThreadResponse__Output {
  /**
   * The turns erased with the thread (their inputs, events and outbox rows too).
   */
  'turnsDeleted': (number);
  /**
   * The live turn cancelled first (cancel set); empty if none.
   */
  'cancelledTurnId': (string);
}
