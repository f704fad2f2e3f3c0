// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface PutWritesResponse {
}

export interface PutWritesResponse__Output {
}
