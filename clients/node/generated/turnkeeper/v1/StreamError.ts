// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


/**
 * A refusal of one message: the gRPC status code and message its unary call answers.
 */
export interface StreamError {
  'code'?: (number);
  'message'?: (string);
}

/**
 * A refusal of one message: the gRPC status code and message its unary call answers.
 */
export interface StreamError__Output {
  'code': (number);
  'message': (string);
}
