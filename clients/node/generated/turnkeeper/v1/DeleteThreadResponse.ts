// Original file: ../../protos/turnkeeper/v1/checkpoints.proto


export interface DeleteThreadResponse {
}

export interface DeleteThreadResponse__Output {
}
