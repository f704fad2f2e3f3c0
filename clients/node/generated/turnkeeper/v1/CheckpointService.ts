// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { CheckpointStreamRequest as _turnkeeper_v1_CheckpointStreamRequest, CheckpointStreamRequest__Output as _turnkeeper_v1_CheckpointStreamRequest__Output } from '../../turnkeeper/v1/CheckpointStreamRequest';
import type { CheckpointStreamResponse as _turnkeeper_v1_CheckpointStreamResponse, CheckpointStreamResponse__Output as _turnkeeper_v1_CheckpointStreamResponse__Output } from '../../turnkeeper/v1/CheckpointStreamResponse';
import type { DeleteThreadRequest as _turnkeeper_v1_DeleteThreadRequest, DeleteThreadRequest__Output as _turnkeeper_v1_DeleteThreadRequest__Output } from '../../turnkeeper/v1/DeleteThreadRequest';
import type { DeleteThreadResponse as _turnkeeper_v1_DeleteThreadResponse, DeleteThreadResponse__Output as _turnkeeper_v1_DeleteThreadResponse__Output } from '../../turnkeeper/v1/DeleteThreadResponse';
import type { GetCheckpointRequest as _turnkeeper_v1_GetCheckpointRequest, GetCheckpointRequest__Output as _turnkeeper_v1_GetCheckpointRequest__Output } from '../../turnkeeper/v1/GetCheckpointRequest';
import type { GetCheckpointResponse as _turnkeeper_v1_GetCheckpointResponse, GetCheckpointResponse__Output as _turnkeeper_v1_GetCheckpointResponse__Output } from '../../turnkeeper/v1/GetCheckpointResponse';
import type { ListCheckpointsRequest as _turnkeeper_v1_ListCheckpointsRequest, ListCheckpointsRequest__Output as _turnkeeper_v1_ListCheckpointsRequest__Output } from '../../turnkeeper/v1/ListCheckpointsRequest';
import type { ListCheckpointsResponse as _turnkeeper_v1_ListCheckpointsResponse, ListCheckpointsResponse__Output as _turnkeeper_v1_ListCheckpointsResponse__Output } from '../../turnkeeper/v1/ListCheckpointsResponse';
import type { PutCheckpointRequest as _turnkeeper_v1_PutCheckpointRequest, PutCheckpointRequest__Output as _turnkeeper_v1_PutCheckpointRequest__Output } from '../../turnkeeper/v1/PutCheckpointRequest';
import type { PutCheckpointResponse as _turnkeeper_v1_PutCheckpointResponse, PutCheckpointResponse__Output as _turnkeeper_v1_PutCheckpointResponse__Output } from '../../turnkeeper/v1/PutCheckpointResponse';
import type { PutWritesRequest as _turnkeeper_v1_PutWritesRequest, PutWritesRequest__Output as _turnkeeper_v1_PutWritesRequest__Output } from '../../turnkeeper/v1/PutWritesRequest';
import type { PutWritesResponse as _turnkeeper_v1_PutWritesResponse, PutWritesResponse__Output as _turnkeeper_v1_PutWritesResponse__Output } from '../../turnkeeper/v1/PutWritesResponse';

/**
 * CheckpointService is the storage behind turnkeeper's RemoteSaver.
 */
export interface CheckpointServiceClient extends grpc.Client {
  /**
   * One graph run's gets, puts, writes and event appends on one open stream: the
   * service handles the messages one at a time in the order they arrive, and answers
   * each (a put, a write or an append only after its commit) with the same id. A
   * fenced message (a stale attempt) ends the stream with ABORTED; any other refusal
   * answers that message with its error and the stream goes on.
   */
  CheckpointStream(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_turnkeeper_v1_CheckpointStreamRequest, _turnkeeper_v1_CheckpointStreamResponse__Output>;
  CheckpointStream(options?: grpc.CallOptions): grpc.ClientDuplexStream<_turnkeeper_v1_CheckpointStreamRequest, _turnkeeper_v1_CheckpointStreamResponse__Output>;
  /**
   * One graph run's gets, puts, writes and event appends on one open stream: the
   * service handles the messages one at a time in the order they arrive, and answers
   * each (a put, a write or an append only after its commit) with the same id. A
   * fenced message (a stale attempt) ends the stream with ABORTED; any other refusal
   * answers that message with its error and the stream goes on.
   */
  checkpointStream(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_turnkeeper_v1_CheckpointStreamRequest, _turnkeeper_v1_CheckpointStreamResponse__Output>;
  checkpointStream(options?: grpc.CallOptions): grpc.ClientDuplexStream<_turnkeeper_v1_CheckpointStreamRequest, _turnkeeper_v1_CheckpointStreamResponse__Output>;
  
  /**
   * Delete every checkpoint and write of a thread.
   */
  DeleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Delete every checkpoint and write of a thread.
   */
  deleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  deleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  deleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  deleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * The checkpoint with checkpoint_id, or the thread's newest in the namespace.
   */
  GetCheckpoint(argument: _turnkeeper_v1_GetCheckpointRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_GetCheckpointResponse__Output>): grpc.ClientUnaryCall;
  GetCheckpoint(argument: _turnkeeper_v1_GetCheckpointRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_GetCheckpointResponse__Output>): grpc.ClientUnaryCall;
  GetCheckpoint(argument: _turnkeeper_v1_GetCheckpointRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_GetCheckpointResponse__Output>): grpc.ClientUnaryCall;
  GetCheckpoint(argument: _turnkeeper_v1_GetCheckpointRequest, callback: grpc.requestCallback<_turnkeeper_v1_GetCheckpointResponse__Output>): grpc.ClientUnaryCall;
  /**
   * The checkpoint with checkpoint_id, or the thread's newest in the namespace.
   */
  getCheckpoint(argument: _turnkeeper_v1_GetCheckpointRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_GetCheckpointResponse__Output>): grpc.ClientUnaryCall;
  getCheckpoint(argument: _turnkeeper_v1_GetCheckpointRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_GetCheckpointResponse__Output>): grpc.ClientUnaryCall;
  getCheckpoint(argument: _turnkeeper_v1_GetCheckpointRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_GetCheckpointResponse__Output>): grpc.ClientUnaryCall;
  getCheckpoint(argument: _turnkeeper_v1_GetCheckpointRequest, callback: grpc.requestCallback<_turnkeeper_v1_GetCheckpointResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Checkpoints, newest first.
   */
  ListCheckpoints(argument: _turnkeeper_v1_ListCheckpointsRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_turnkeeper_v1_ListCheckpointsResponse__Output>;
  ListCheckpoints(argument: _turnkeeper_v1_ListCheckpointsRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_turnkeeper_v1_ListCheckpointsResponse__Output>;
  /**
   * Checkpoints, newest first.
   */
  listCheckpoints(argument: _turnkeeper_v1_ListCheckpointsRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_turnkeeper_v1_ListCheckpointsResponse__Output>;
  listCheckpoints(argument: _turnkeeper_v1_ListCheckpointsRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_turnkeeper_v1_ListCheckpointsResponse__Output>;
  
  /**
   * Store a checkpoint. With turn_id set it is fenced by attempt and records the
   * turn's last_seq as its boundary.
   */
  PutCheckpoint(argument: _turnkeeper_v1_PutCheckpointRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PutCheckpointResponse__Output>): grpc.ClientUnaryCall;
  PutCheckpoint(argument: _turnkeeper_v1_PutCheckpointRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_PutCheckpointResponse__Output>): grpc.ClientUnaryCall;
  PutCheckpoint(argument: _turnkeeper_v1_PutCheckpointRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PutCheckpointResponse__Output>): grpc.ClientUnaryCall;
  PutCheckpoint(argument: _turnkeeper_v1_PutCheckpointRequest, callback: grpc.requestCallback<_turnkeeper_v1_PutCheckpointResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Store a checkpoint. With turn_id set it is fenced by attempt and records the
   * turn's last_seq as its boundary.
   */
  putCheckpoint(argument: _turnkeeper_v1_PutCheckpointRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PutCheckpointResponse__Output>): grpc.ClientUnaryCall;
  putCheckpoint(argument: _turnkeeper_v1_PutCheckpointRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_PutCheckpointResponse__Output>): grpc.ClientUnaryCall;
  putCheckpoint(argument: _turnkeeper_v1_PutCheckpointRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PutCheckpointResponse__Output>): grpc.ClientUnaryCall;
  putCheckpoint(argument: _turnkeeper_v1_PutCheckpointRequest, callback: grpc.requestCallback<_turnkeeper_v1_PutCheckpointResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Store a task's intermediate writes against a checkpoint. Fenced like PutCheckpoint.
   */
  PutWrites(argument: _turnkeeper_v1_PutWritesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PutWritesResponse__Output>): grpc.ClientUnaryCall;
  PutWrites(argument: _turnkeeper_v1_PutWritesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_PutWritesResponse__Output>): grpc.ClientUnaryCall;
  PutWrites(argument: _turnkeeper_v1_PutWritesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PutWritesResponse__Output>): grpc.ClientUnaryCall;
  PutWrites(argument: _turnkeeper_v1_PutWritesRequest, callback: grpc.requestCallback<_turnkeeper_v1_PutWritesResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Store a task's intermediate writes against a checkpoint. Fenced like PutCheckpoint.
   */
  putWrites(argument: _turnkeeper_v1_PutWritesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PutWritesResponse__Output>): grpc.ClientUnaryCall;
  putWrites(argument: _turnkeeper_v1_PutWritesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_PutWritesResponse__Output>): grpc.ClientUnaryCall;
  putWrites(argument: _turnkeeper_v1_PutWritesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PutWritesResponse__Output>): grpc.ClientUnaryCall;
  putWrites(argument: _turnkeeper_v1_PutWritesRequest, callback: grpc.requestCallback<_turnkeeper_v1_PutWritesResponse__Output>): grpc.ClientUnaryCall;
  
}

/**
 * CheckpointService is the storage behind turnkeeper's RemoteSaver.
 */
export interface CheckpointServiceHandlers extends grpc.UntypedServiceImplementation {
  /**
   * One graph run's gets, puts, writes and event appends on one open stream: the
   * service handles the messages one at a time in the order they arrive, and answers
   * each (a put, a write or an append only after its commit) with the same id. A
   * fenced message (a stale attempt) ends the stream with ABORTED; any other refusal
   * answers that message with its error and the stream goes on.
   */
  CheckpointStream: grpc.handleBidiStreamingCall<_turnkeeper_v1_CheckpointStreamRequest__Output, _turnkeeper_v1_CheckpointStreamResponse>;
  
  /**
   * Delete every checkpoint and write of a thread.
   */
  DeleteThread: grpc.handleUnaryCall<_turnkeeper_v1_DeleteThreadRequest__Output, _turnkeeper_v1_DeleteThreadResponse>;
  
  /**
   * The checkpoint with checkpoint_id, or the thread's newest in the namespace.
   */
  GetCheckpoint: grpc.handleUnaryCall<_turnkeeper_v1_GetCheckpointRequest__Output, _turnkeeper_v1_GetCheckpointResponse>;
  
  /**
   * Checkpoints, newest first.
   */
  ListCheckpoints: grpc.handleServerStreamingCall<_turnkeeper_v1_ListCheckpointsRequest__Output, _turnkeeper_v1_ListCheckpointsResponse>;
  
  /**
   * Store a checkpoint. With turn_id set it is fenced by attempt and records the
   * turn's last_seq as its boundary.
   */
  PutCheckpoint: grpc.handleUnaryCall<_turnkeeper_v1_PutCheckpointRequest__Output, _turnkeeper_v1_PutCheckpointResponse>;
  
  /**
   * Store a task's intermediate writes against a checkpoint. Fenced like PutCheckpoint.
   */
  PutWrites: grpc.handleUnaryCall<_turnkeeper_v1_PutWritesRequest__Output, _turnkeeper_v1_PutWritesResponse>;
  
}

export interface CheckpointServiceDefinition extends grpc.ServiceDefinition {
  CheckpointStream: MethodDefinition<_turnkeeper_v1_CheckpointStreamRequest, _turnkeeper_v1_CheckpointStreamResponse, _turnkeeper_v1_CheckpointStreamRequest__Output, _turnkeeper_v1_CheckpointStreamResponse__Output>
  DeleteThread: MethodDefinition<_turnkeeper_v1_DeleteThreadRequest, _turnkeeper_v1_DeleteThreadResponse, _turnkeeper_v1_DeleteThreadRequest__Output, _turnkeeper_v1_DeleteThreadResponse__Output>
  GetCheckpoint: MethodDefinition<_turnkeeper_v1_GetCheckpointRequest, _turnkeeper_v1_GetCheckpointResponse, _turnkeeper_v1_GetCheckpointRequest__Output, _turnkeeper_v1_GetCheckpointResponse__Output>
  ListCheckpoints: MethodDefinition<_turnkeeper_v1_ListCheckpointsRequest, _turnkeeper_v1_ListCheckpointsResponse, _turnkeeper_v1_ListCheckpointsRequest__Output, _turnkeeper_v1_ListCheckpointsResponse__Output>
  PutCheckpoint: MethodDefinition<_turnkeeper_v1_PutCheckpointRequest, _turnkeeper_v1_PutCheckpointResponse, _turnkeeper_v1_PutCheckpointRequest__Output, _turnkeeper_v1_PutCheckpointResponse__Output>
  PutWrites: MethodDefinition<_turnkeeper_v1_PutWritesRequest, _turnkeeper_v1_PutWritesResponse, _turnkeeper_v1_PutWritesRequest__Output, _turnkeeper_v1_PutWritesResponse__Output>
}
