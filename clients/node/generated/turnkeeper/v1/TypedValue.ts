// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


/**
 * A serialized value: the serializer's type tag and its bytes.
 */
export interface TypedValue {
  'type'?: (string);
  'data'?: (Buffer | Uint8Array | string);
}

/**
 * A serialized value: the serializer's type tag and its bytes.
 */
export interface TypedValue__Output {
  'type': (string);
  'data': (Buffer);
}
