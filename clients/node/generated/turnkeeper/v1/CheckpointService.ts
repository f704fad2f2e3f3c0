// Original file: ../../protos/turnkeeper/v1/checkpoints.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { CopyThreadRequest as _turnkeeper_v1_CopyThreadRequest, CopyThreadRequest__Output as _turnkeeper_v1_CopyThreadRequest__Output } from '../../turnkeeper/v1/CopyThreadRequest';
import type { CopyThreadResponse as _turnkeeper_v1_CopyThreadResponse, CopyThreadResponse__Output as _turnkeeper_v1_CopyThreadResponse__Output } from '../../turnkeeper/v1/CopyThreadResponse';
import type { DeleteForRunsRequest as _turnkeeper_v1_DeleteForRunsRequest, DeleteForRunsRequest__Output as _turnkeeper_v1_DeleteForRunsRequest__Output } from '../../turnkeeper/v1/DeleteForRunsRequest';
import type { DeleteForRunsResponse as _turnkeeper_v1_DeleteForRunsResponse, DeleteForRunsResponse__Output as _turnkeeper_v1_DeleteForRunsResponse__Output } from '../../turnkeeper/v1/DeleteForRunsResponse';
import type { DeleteThreadRequest as _turnkeeper_v1_DeleteThreadRequest, DeleteThreadRequest__Output as _turnkeeper_v1_DeleteThreadRequest__Output } from '../../turnkeeper/v1/DeleteThreadRequest';
import type { DeleteThreadResponse as _turnkeeper_v1_DeleteThreadResponse, DeleteThreadResponse__Output as _turnkeeper_v1_DeleteThreadResponse__Output } from '../../turnkeeper/v1/DeleteThreadResponse';
import type { GetCheckpointRequest as _turnkeeper_v1_GetCheckpointRequest, GetCheckpointRequest__Output as _turnkeeper_v1_GetCheckpointRequest__Output } from '../../turnkeeper/v1/GetCheckpointRequest';
import type { GetCheckpointResponse as _turnkeeper_v1_GetCheckpointResponse, GetCheckpointResponse__Output as _turnkeeper_v1_GetCheckpointResponse__Output } from '../../turnkeeper/v1/GetCheckpointResponse';
import type { ListCheckpointsRequest as _turnkeeper_v1_ListCheckpointsRequest, ListCheckpointsRequest__Output as _turnkeeper_v1_ListCheckpointsRequest__Output } from '../../turnkeeper/v1/ListCheckpointsRequest';
import type { ListCheckpointsResponse as _turnkeeper_v1_ListCheckpointsResponse, ListCheckpointsResponse__Output as _turnkeeper_v1_ListCheckpointsResponse__Output } from '../../turnkeeper/v1/ListCheckpointsResponse';
import type { PruneThreadsRequest as _turnkeeper_v1_PruneThreadsRequest, PruneThreadsRequest__Output as _turnkeeper_v1_PruneThreadsRequest__Output } from '../../turnkeeper/v1/PruneThreadsRequest';
import type { PruneThreadsResponse as _turnkeeper_v1_PruneThreadsResponse, PruneThreadsResponse__Output as _turnkeeper_v1_PruneThreadsResponse__Output } from '../../turnkeeper/v1/PruneThreadsResponse';
import type { PutCheckpointRequest as _turnkeeper_v1_PutCheckpointRequest, PutCheckpointRequest__Output as _turnkeeper_v1_PutCheckpointRequest__Output } from '../../turnkeeper/v1/PutCheckpointRequest';
import type { PutCheckpointResponse as _turnkeeper_v1_PutCheckpointResponse, PutCheckpointResponse__Output as _turnkeeper_v1_PutCheckpointResponse__Output } from '../../turnkeeper/v1/PutCheckpointResponse';
import type { PutWritesRequest as _turnkeeper_v1_PutWritesRequest, PutWritesRequest__Output as _turnkeeper_v1_PutWritesRequest__Output } from '../../turnkeeper/v1/PutWritesRequest';
import type { PutWritesResponse as _turnkeeper_v1_PutWritesResponse, PutWritesResponse__Output as _turnkeeper_v1_PutWritesResponse__Output } from '../../turnkeeper/v1/PutWritesResponse';

/**
 * CheckpointService is the storage behind turnkeeper's RemoteSaver.
 */
export interface CheckpointServiceClient extends grpc.Client {
  /**
   * LangGraph's copy_thread: every checkpoint and write of the source thread, under
   * the target thread. FAILED_PRECONDITION when the target has a live turn.
   */
  CopyThread(argument: _turnkeeper_v1_CopyThreadRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_CopyThreadResponse__Output>): grpc.ClientUnaryCall;
  CopyThread(argument: _turnkeeper_v1_CopyThreadRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_CopyThreadResponse__Output>): grpc.ClientUnaryCall;
  CopyThread(argument: _turnkeeper_v1_CopyThreadRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_CopyThreadResponse__Output>): grpc.ClientUnaryCall;
  CopyThread(argument: _turnkeeper_v1_CopyThreadRequest, callback: grpc.requestCallback<_turnkeeper_v1_CopyThreadResponse__Output>): grpc.ClientUnaryCall;
  /**
   * LangGraph's copy_thread: every checkpoint and write of the source thread, under
   * the target thread. FAILED_PRECONDITION when the target has a live turn.
   */
  copyThread(argument: _turnkeeper_v1_CopyThreadRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_CopyThreadResponse__Output>): grpc.ClientUnaryCall;
  copyThread(argument: _turnkeeper_v1_CopyThreadRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_CopyThreadResponse__Output>): grpc.ClientUnaryCall;
  copyThread(argument: _turnkeeper_v1_CopyThreadRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_CopyThreadResponse__Output>): grpc.ClientUnaryCall;
  copyThread(argument: _turnkeeper_v1_CopyThreadRequest, callback: grpc.requestCallback<_turnkeeper_v1_CopyThreadResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * LangGraph's delete_for_runs: delete the checkpoints whose metadata run_id is one
   * of run_ids, with their writes. FAILED_PRECONDITION if one is of a live thread.
   */
  DeleteForRuns(argument: _turnkeeper_v1_DeleteForRunsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteForRunsResponse__Output>): grpc.ClientUnaryCall;
  DeleteForRuns(argument: _turnkeeper_v1_DeleteForRunsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_DeleteForRunsResponse__Output>): grpc.ClientUnaryCall;
  DeleteForRuns(argument: _turnkeeper_v1_DeleteForRunsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteForRunsResponse__Output>): grpc.ClientUnaryCall;
  DeleteForRuns(argument: _turnkeeper_v1_DeleteForRunsRequest, callback: grpc.requestCallback<_turnkeeper_v1_DeleteForRunsResponse__Output>): grpc.ClientUnaryCall;
  /**
   * LangGraph's delete_for_runs: delete the checkpoints whose metadata run_id is one
   * of run_ids, with their writes. FAILED_PRECONDITION if one is of a live thread.
   */
  deleteForRuns(argument: _turnkeeper_v1_DeleteForRunsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteForRunsResponse__Output>): grpc.ClientUnaryCall;
  deleteForRuns(argument: _turnkeeper_v1_DeleteForRunsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_DeleteForRunsResponse__Output>): grpc.ClientUnaryCall;
  deleteForRuns(argument: _turnkeeper_v1_DeleteForRunsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteForRunsResponse__Output>): grpc.ClientUnaryCall;
  deleteForRuns(argument: _turnkeeper_v1_DeleteForRunsRequest, callback: grpc.requestCallback<_turnkeeper_v1_DeleteForRunsResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Erase a thread: its turns (inputs, events, outbox rows), boundaries,
   * checkpoints and writes. Refused while a turn of it is live unless cancel is set.
   */
  DeleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  DeleteThread(argument: _turnkeeper_v1_DeleteThreadRequest, callback: grpc.requestCallback<_turnkeeper_v1_DeleteThreadResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Erase a thread: its turns (inputs, events, outbox rows), boundaries,
   * checkpoints and writes. Refused while a turn of it is live unless cancel is set.
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
   * LangGraph's prune: keep only the latest checkpoint of each namespace of each
   * thread (with its writes), or delete them all. FAILED_PRECONDITION for a thread
   * with a live or queued turn.
   */
  PruneThreads(argument: _turnkeeper_v1_PruneThreadsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PruneThreadsResponse__Output>): grpc.ClientUnaryCall;
  PruneThreads(argument: _turnkeeper_v1_PruneThreadsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_PruneThreadsResponse__Output>): grpc.ClientUnaryCall;
  PruneThreads(argument: _turnkeeper_v1_PruneThreadsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PruneThreadsResponse__Output>): grpc.ClientUnaryCall;
  PruneThreads(argument: _turnkeeper_v1_PruneThreadsRequest, callback: grpc.requestCallback<_turnkeeper_v1_PruneThreadsResponse__Output>): grpc.ClientUnaryCall;
  /**
   * LangGraph's prune: keep only the latest checkpoint of each namespace of each
   * thread (with its writes), or delete them all. FAILED_PRECONDITION for a thread
   * with a live or queued turn.
   */
  pruneThreads(argument: _turnkeeper_v1_PruneThreadsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PruneThreadsResponse__Output>): grpc.ClientUnaryCall;
  pruneThreads(argument: _turnkeeper_v1_PruneThreadsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_PruneThreadsResponse__Output>): grpc.ClientUnaryCall;
  pruneThreads(argument: _turnkeeper_v1_PruneThreadsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_PruneThreadsResponse__Output>): grpc.ClientUnaryCall;
  pruneThreads(argument: _turnkeeper_v1_PruneThreadsRequest, callback: grpc.requestCallback<_turnkeeper_v1_PruneThreadsResponse__Output>): grpc.ClientUnaryCall;
  
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
   * LangGraph's copy_thread: every checkpoint and write of the source thread, under
   * the target thread. FAILED_PRECONDITION when the target has a live turn.
   */
  CopyThread: grpc.handleUnaryCall<_turnkeeper_v1_CopyThreadRequest__Output, _turnkeeper_v1_CopyThreadResponse>;
  
  /**
   * LangGraph's delete_for_runs: delete the checkpoints whose metadata run_id is one
   * of run_ids, with their writes. FAILED_PRECONDITION if one is of a live thread.
   */
  DeleteForRuns: grpc.handleUnaryCall<_turnkeeper_v1_DeleteForRunsRequest__Output, _turnkeeper_v1_DeleteForRunsResponse>;
  
  /**
   * Erase a thread: its turns (inputs, events, outbox rows), boundaries,
   * checkpoints and writes. Refused while a turn of it is live unless cancel is set.
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
   * LangGraph's prune: keep only the latest checkpoint of each namespace of each
   * thread (with its writes), or delete them all. FAILED_PRECONDITION for a thread
   * with a live or queued turn.
   */
  PruneThreads: grpc.handleUnaryCall<_turnkeeper_v1_PruneThreadsRequest__Output, _turnkeeper_v1_PruneThreadsResponse>;
  
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
  CopyThread: MethodDefinition<_turnkeeper_v1_CopyThreadRequest, _turnkeeper_v1_CopyThreadResponse, _turnkeeper_v1_CopyThreadRequest__Output, _turnkeeper_v1_CopyThreadResponse__Output>
  DeleteForRuns: MethodDefinition<_turnkeeper_v1_DeleteForRunsRequest, _turnkeeper_v1_DeleteForRunsResponse, _turnkeeper_v1_DeleteForRunsRequest__Output, _turnkeeper_v1_DeleteForRunsResponse__Output>
  DeleteThread: MethodDefinition<_turnkeeper_v1_DeleteThreadRequest, _turnkeeper_v1_DeleteThreadResponse, _turnkeeper_v1_DeleteThreadRequest__Output, _turnkeeper_v1_DeleteThreadResponse__Output>
  GetCheckpoint: MethodDefinition<_turnkeeper_v1_GetCheckpointRequest, _turnkeeper_v1_GetCheckpointResponse, _turnkeeper_v1_GetCheckpointRequest__Output, _turnkeeper_v1_GetCheckpointResponse__Output>
  ListCheckpoints: MethodDefinition<_turnkeeper_v1_ListCheckpointsRequest, _turnkeeper_v1_ListCheckpointsResponse, _turnkeeper_v1_ListCheckpointsRequest__Output, _turnkeeper_v1_ListCheckpointsResponse__Output>
  PruneThreads: MethodDefinition<_turnkeeper_v1_PruneThreadsRequest, _turnkeeper_v1_PruneThreadsResponse, _turnkeeper_v1_PruneThreadsRequest__Output, _turnkeeper_v1_PruneThreadsResponse__Output>
  PutCheckpoint: MethodDefinition<_turnkeeper_v1_PutCheckpointRequest, _turnkeeper_v1_PutCheckpointResponse, _turnkeeper_v1_PutCheckpointRequest__Output, _turnkeeper_v1_PutCheckpointResponse__Output>
  PutWrites: MethodDefinition<_turnkeeper_v1_PutWritesRequest, _turnkeeper_v1_PutWritesResponse, _turnkeeper_v1_PutWritesRequest__Output, _turnkeeper_v1_PutWritesResponse__Output>
}
