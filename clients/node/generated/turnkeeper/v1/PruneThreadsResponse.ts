// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface PruneThreadsResponse {
  'checkpointsDeleted'?: (number);
}

export interface PruneThreadsResponse__Output {
  'checkpointsDeleted': (number);
}
