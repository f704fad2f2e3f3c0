// Original file: ../../protos/turnkeeper/v1/turns.proto


export interface RedriveRequest {
  /**
   * Startup form.
   */
  'agent'?: (string);
  'replica'?: (string);
  'incarnation'?: (string);
  /**
   * Operator form.
   */
  'turnId'?: (string);
  'force'?: (boolean);
}

export interface RedriveRequest__Output {
  /**
   * Startup form.
   */
  'agent': (string);
  'replica': (string);
  'incarnation': (string);
  /**
   * Operator form.
   */
  'turnId': (string);
  'force': (boolean);
}
