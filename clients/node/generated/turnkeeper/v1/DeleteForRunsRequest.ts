// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface DeleteForRunsRequest {
  'runIds'?: (string)[];
}

export interface DeleteForRunsRequest__Output {
  'runIds': (string)[];
}
