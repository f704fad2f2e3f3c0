// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface DeleteForRunsResponse {
  'checkpointsDeleted'?: (number);
}

export interface DeleteForRunsResponse__Output {
  'checkpointsDeleted': (number);
}
