// Original file: ../../protos/turnkeeper/v1/turns.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { AppendEventsRequest as _turnkeeper_v1_AppendEventsRequest, AppendEventsRequest__Output as _turnkeeper_v1_AppendEventsRequest__Output } from '../../turnkeeper/v1/AppendEventsRequest';
import type { AppendEventsResponse as _turnkeeper_v1_AppendEventsResponse, AppendEventsResponse__Output as _turnkeeper_v1_AppendEventsResponse__Output } from '../../turnkeeper/v1/AppendEventsResponse';
import type { CancelTurnRequest as _turnkeeper_v1_CancelTurnRequest, CancelTurnRequest__Output as _turnkeeper_v1_CancelTurnRequest__Output } from '../../turnkeeper/v1/CancelTurnRequest';
import type { CancelTurnResponse as _turnkeeper_v1_CancelTurnResponse, CancelTurnResponse__Output as _turnkeeper_v1_CancelTurnResponse__Output } from '../../turnkeeper/v1/CancelTurnResponse';
import type { ClaimTurnRequest as _turnkeeper_v1_ClaimTurnRequest, ClaimTurnRequest__Output as _turnkeeper_v1_ClaimTurnRequest__Output } from '../../turnkeeper/v1/ClaimTurnRequest';
import type { ClaimTurnResponse as _turnkeeper_v1_ClaimTurnResponse, ClaimTurnResponse__Output as _turnkeeper_v1_ClaimTurnResponse__Output } from '../../turnkeeper/v1/ClaimTurnResponse';
import type { FinishTurnRequest as _turnkeeper_v1_FinishTurnRequest, FinishTurnRequest__Output as _turnkeeper_v1_FinishTurnRequest__Output } from '../../turnkeeper/v1/FinishTurnRequest';
import type { FinishTurnResponse as _turnkeeper_v1_FinishTurnResponse, FinishTurnResponse__Output as _turnkeeper_v1_FinishTurnResponse__Output } from '../../turnkeeper/v1/FinishTurnResponse';
import type { GetTurnRequest as _turnkeeper_v1_GetTurnRequest, GetTurnRequest__Output as _turnkeeper_v1_GetTurnRequest__Output } from '../../turnkeeper/v1/GetTurnRequest';
import type { GetTurnResponse as _turnkeeper_v1_GetTurnResponse, GetTurnResponse__Output as _turnkeeper_v1_GetTurnResponse__Output } from '../../turnkeeper/v1/GetTurnResponse';
import type { HeartbeatRequest as _turnkeeper_v1_HeartbeatRequest, HeartbeatRequest__Output as _turnkeeper_v1_HeartbeatRequest__Output } from '../../turnkeeper/v1/HeartbeatRequest';
import type { HeartbeatResponse as _turnkeeper_v1_HeartbeatResponse, HeartbeatResponse__Output as _turnkeeper_v1_HeartbeatResponse__Output } from '../../turnkeeper/v1/HeartbeatResponse';
import type { ListEventsRequest as _turnkeeper_v1_ListEventsRequest, ListEventsRequest__Output as _turnkeeper_v1_ListEventsRequest__Output } from '../../turnkeeper/v1/ListEventsRequest';
import type { ListEventsResponse as _turnkeeper_v1_ListEventsResponse, ListEventsResponse__Output as _turnkeeper_v1_ListEventsResponse__Output } from '../../turnkeeper/v1/ListEventsResponse';
import type { ListTurnsRequest as _turnkeeper_v1_ListTurnsRequest, ListTurnsRequest__Output as _turnkeeper_v1_ListTurnsRequest__Output } from '../../turnkeeper/v1/ListTurnsRequest';
import type { ListTurnsResponse as _turnkeeper_v1_ListTurnsResponse, ListTurnsResponse__Output as _turnkeeper_v1_ListTurnsResponse__Output } from '../../turnkeeper/v1/ListTurnsResponse';
import type { ParkTurnRequest as _turnkeeper_v1_ParkTurnRequest, ParkTurnRequest__Output as _turnkeeper_v1_ParkTurnRequest__Output } from '../../turnkeeper/v1/ParkTurnRequest';
import type { ParkTurnResponse as _turnkeeper_v1_ParkTurnResponse, ParkTurnResponse__Output as _turnkeeper_v1_ParkTurnResponse__Output } from '../../turnkeeper/v1/ParkTurnResponse';
import type { RedriveRequest as _turnkeeper_v1_RedriveRequest, RedriveRequest__Output as _turnkeeper_v1_RedriveRequest__Output } from '../../turnkeeper/v1/RedriveRequest';
import type { RedriveResponse as _turnkeeper_v1_RedriveResponse, RedriveResponse__Output as _turnkeeper_v1_RedriveResponse__Output } from '../../turnkeeper/v1/RedriveResponse';
import type { ResumeDetachedRequest as _turnkeeper_v1_ResumeDetachedRequest, ResumeDetachedRequest__Output as _turnkeeper_v1_ResumeDetachedRequest__Output } from '../../turnkeeper/v1/ResumeDetachedRequest';
import type { ResumeDetachedResponse as _turnkeeper_v1_ResumeDetachedResponse, ResumeDetachedResponse__Output as _turnkeeper_v1_ResumeDetachedResponse__Output } from '../../turnkeeper/v1/ResumeDetachedResponse';
import type { StartTurnRequest as _turnkeeper_v1_StartTurnRequest, StartTurnRequest__Output as _turnkeeper_v1_StartTurnRequest__Output } from '../../turnkeeper/v1/StartTurnRequest';
import type { StartTurnResponse as _turnkeeper_v1_StartTurnResponse, StartTurnResponse__Output as _turnkeeper_v1_StartTurnResponse__Output } from '../../turnkeeper/v1/StartTurnResponse';
import type { TurnStatusRequest as _turnkeeper_v1_TurnStatusRequest, TurnStatusRequest__Output as _turnkeeper_v1_TurnStatusRequest__Output } from '../../turnkeeper/v1/TurnStatusRequest';
import type { TurnStatusResponse as _turnkeeper_v1_TurnStatusResponse, TurnStatusResponse__Output as _turnkeeper_v1_TurnStatusResponse__Output } from '../../turnkeeper/v1/TurnStatusResponse';
import type { WatchTurnRequest as _turnkeeper_v1_WatchTurnRequest, WatchTurnRequest__Output as _turnkeeper_v1_WatchTurnRequest__Output } from '../../turnkeeper/v1/WatchTurnRequest';
import type { WatchTurnResponse as _turnkeeper_v1_WatchTurnResponse, WatchTurnResponse__Output as _turnkeeper_v1_WatchTurnResponse__Output } from '../../turnkeeper/v1/WatchTurnResponse';

/**
 * TurnService owns the turn journal (turns.db): its state machine, the retained
 * events of every turn, and the outbox that mirrors both to NATS.
 */
export interface TurnServiceClient extends grpc.Client {
  /**
   * Append a batch of events. Fenced by attempt; seqs must continue last_seq;
   * an event already stored with the same (attempt, seq) and content is skipped.
   */
  AppendEvents(argument: _turnkeeper_v1_AppendEventsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_AppendEventsResponse__Output>): grpc.ClientUnaryCall;
  AppendEvents(argument: _turnkeeper_v1_AppendEventsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_AppendEventsResponse__Output>): grpc.ClientUnaryCall;
  AppendEvents(argument: _turnkeeper_v1_AppendEventsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_AppendEventsResponse__Output>): grpc.ClientUnaryCall;
  AppendEvents(argument: _turnkeeper_v1_AppendEventsRequest, callback: grpc.requestCallback<_turnkeeper_v1_AppendEventsResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Append a batch of events. Fenced by attempt; seqs must continue last_seq;
   * an event already stored with the same (attempt, seq) and content is skipped.
   */
  appendEvents(argument: _turnkeeper_v1_AppendEventsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_AppendEventsResponse__Output>): grpc.ClientUnaryCall;
  appendEvents(argument: _turnkeeper_v1_AppendEventsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_AppendEventsResponse__Output>): grpc.ClientUnaryCall;
  appendEvents(argument: _turnkeeper_v1_AppendEventsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_AppendEventsResponse__Output>): grpc.ClientUnaryCall;
  appendEvents(argument: _turnkeeper_v1_AppendEventsRequest, callback: grpc.requestCallback<_turnkeeper_v1_AppendEventsResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * RUNNING, PARKED or QUEUED -> CANCELLED. The service writes the terminal
   * turn.cancelled event, tells the replica running the turn to stop, and refuses
   * every later write of that execution (ABORTED). The thread's checkpoints stay
   * unless rollback is set. A turn already over: FAILED_PRECONDITION.
   */
  CancelTurn(argument: _turnkeeper_v1_CancelTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_CancelTurnResponse__Output>): grpc.ClientUnaryCall;
  CancelTurn(argument: _turnkeeper_v1_CancelTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_CancelTurnResponse__Output>): grpc.ClientUnaryCall;
  CancelTurn(argument: _turnkeeper_v1_CancelTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_CancelTurnResponse__Output>): grpc.ClientUnaryCall;
  CancelTurn(argument: _turnkeeper_v1_CancelTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_CancelTurnResponse__Output>): grpc.ClientUnaryCall;
  /**
   * RUNNING, PARKED or QUEUED -> CANCELLED. The service writes the terminal
   * turn.cancelled event, tells the replica running the turn to stop, and refuses
   * every later write of that execution (ABORTED). The thread's checkpoints stay
   * unless rollback is set. A turn already over: FAILED_PRECONDITION.
   */
  cancelTurn(argument: _turnkeeper_v1_CancelTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_CancelTurnResponse__Output>): grpc.ClientUnaryCall;
  cancelTurn(argument: _turnkeeper_v1_CancelTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_CancelTurnResponse__Output>): grpc.ClientUnaryCall;
  cancelTurn(argument: _turnkeeper_v1_CancelTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_CancelTurnResponse__Output>): grpc.ClientUnaryCall;
  cancelTurn(argument: _turnkeeper_v1_CancelTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_CancelTurnResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Take over a RUNNING turn that has no owner (after a resume or a lease-expiry
   * re-drive was handed to this replica over NATS). Fenced by attempt.
   */
  ClaimTurn(argument: _turnkeeper_v1_ClaimTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ClaimTurnResponse__Output>): grpc.ClientUnaryCall;
  ClaimTurn(argument: _turnkeeper_v1_ClaimTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ClaimTurnResponse__Output>): grpc.ClientUnaryCall;
  ClaimTurn(argument: _turnkeeper_v1_ClaimTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ClaimTurnResponse__Output>): grpc.ClientUnaryCall;
  ClaimTurn(argument: _turnkeeper_v1_ClaimTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_ClaimTurnResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Take over a RUNNING turn that has no owner (after a resume or a lease-expiry
   * re-drive was handed to this replica over NATS). Fenced by attempt.
   */
  claimTurn(argument: _turnkeeper_v1_ClaimTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ClaimTurnResponse__Output>): grpc.ClientUnaryCall;
  claimTurn(argument: _turnkeeper_v1_ClaimTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ClaimTurnResponse__Output>): grpc.ClientUnaryCall;
  claimTurn(argument: _turnkeeper_v1_ClaimTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ClaimTurnResponse__Output>): grpc.ClientUnaryCall;
  claimTurn(argument: _turnkeeper_v1_ClaimTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_ClaimTurnResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * RUNNING -> DONE or FAILED; the service appends the terminal event.
   */
  FinishTurn(argument: _turnkeeper_v1_FinishTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_FinishTurnResponse__Output>): grpc.ClientUnaryCall;
  FinishTurn(argument: _turnkeeper_v1_FinishTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_FinishTurnResponse__Output>): grpc.ClientUnaryCall;
  FinishTurn(argument: _turnkeeper_v1_FinishTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_FinishTurnResponse__Output>): grpc.ClientUnaryCall;
  FinishTurn(argument: _turnkeeper_v1_FinishTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_FinishTurnResponse__Output>): grpc.ClientUnaryCall;
  /**
   * RUNNING -> DONE or FAILED; the service appends the terminal event.
   */
  finishTurn(argument: _turnkeeper_v1_FinishTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_FinishTurnResponse__Output>): grpc.ClientUnaryCall;
  finishTurn(argument: _turnkeeper_v1_FinishTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_FinishTurnResponse__Output>): grpc.ClientUnaryCall;
  finishTurn(argument: _turnkeeper_v1_FinishTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_FinishTurnResponse__Output>): grpc.ClientUnaryCall;
  finishTurn(argument: _turnkeeper_v1_FinishTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_FinishTurnResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * The whole record of a turn; NOT_FOUND for an unknown id.
   */
  GetTurn(argument: _turnkeeper_v1_GetTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_GetTurnResponse__Output>): grpc.ClientUnaryCall;
  GetTurn(argument: _turnkeeper_v1_GetTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_GetTurnResponse__Output>): grpc.ClientUnaryCall;
  GetTurn(argument: _turnkeeper_v1_GetTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_GetTurnResponse__Output>): grpc.ClientUnaryCall;
  GetTurn(argument: _turnkeeper_v1_GetTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_GetTurnResponse__Output>): grpc.ClientUnaryCall;
  /**
   * The whole record of a turn; NOT_FOUND for an unknown id.
   */
  getTurn(argument: _turnkeeper_v1_GetTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_GetTurnResponse__Output>): grpc.ClientUnaryCall;
  getTurn(argument: _turnkeeper_v1_GetTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_GetTurnResponse__Output>): grpc.ClientUnaryCall;
  getTurn(argument: _turnkeeper_v1_GetTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_GetTurnResponse__Output>): grpc.ClientUnaryCall;
  getTurn(argument: _turnkeeper_v1_GetTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_GetTurnResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Renew the executor's lease on a RUNNING turn. Fenced by attempt and owner.
   */
  Heartbeat(argument: _turnkeeper_v1_HeartbeatRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_HeartbeatResponse__Output>): grpc.ClientUnaryCall;
  Heartbeat(argument: _turnkeeper_v1_HeartbeatRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_HeartbeatResponse__Output>): grpc.ClientUnaryCall;
  Heartbeat(argument: _turnkeeper_v1_HeartbeatRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_HeartbeatResponse__Output>): grpc.ClientUnaryCall;
  Heartbeat(argument: _turnkeeper_v1_HeartbeatRequest, callback: grpc.requestCallback<_turnkeeper_v1_HeartbeatResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Renew the executor's lease on a RUNNING turn. Fenced by attempt and owner.
   */
  heartbeat(argument: _turnkeeper_v1_HeartbeatRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_HeartbeatResponse__Output>): grpc.ClientUnaryCall;
  heartbeat(argument: _turnkeeper_v1_HeartbeatRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_HeartbeatResponse__Output>): grpc.ClientUnaryCall;
  heartbeat(argument: _turnkeeper_v1_HeartbeatRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_HeartbeatResponse__Output>): grpc.ClientUnaryCall;
  heartbeat(argument: _turnkeeper_v1_HeartbeatRequest, callback: grpc.requestCallback<_turnkeeper_v1_HeartbeatResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * The retained events of a turn, in seq order, paged.
   */
  ListEvents(argument: _turnkeeper_v1_ListEventsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListEvents(argument: _turnkeeper_v1_ListEventsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListEvents(argument: _turnkeeper_v1_ListEventsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  ListEvents(argument: _turnkeeper_v1_ListEventsRequest, callback: grpc.requestCallback<_turnkeeper_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  /**
   * The retained events of a turn, in seq order, paged.
   */
  listEvents(argument: _turnkeeper_v1_ListEventsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listEvents(argument: _turnkeeper_v1_ListEventsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listEvents(argument: _turnkeeper_v1_ListEventsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  listEvents(argument: _turnkeeper_v1_ListEventsRequest, callback: grpc.requestCallback<_turnkeeper_v1_ListEventsResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Turns, newest first, filtered and paged.
   */
  ListTurns(argument: _turnkeeper_v1_ListTurnsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ListTurnsResponse__Output>): grpc.ClientUnaryCall;
  ListTurns(argument: _turnkeeper_v1_ListTurnsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ListTurnsResponse__Output>): grpc.ClientUnaryCall;
  ListTurns(argument: _turnkeeper_v1_ListTurnsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ListTurnsResponse__Output>): grpc.ClientUnaryCall;
  ListTurns(argument: _turnkeeper_v1_ListTurnsRequest, callback: grpc.requestCallback<_turnkeeper_v1_ListTurnsResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Turns, newest first, filtered and paged.
   */
  listTurns(argument: _turnkeeper_v1_ListTurnsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ListTurnsResponse__Output>): grpc.ClientUnaryCall;
  listTurns(argument: _turnkeeper_v1_ListTurnsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ListTurnsResponse__Output>): grpc.ClientUnaryCall;
  listTurns(argument: _turnkeeper_v1_ListTurnsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ListTurnsResponse__Output>): grpc.ClientUnaryCall;
  listTurns(argument: _turnkeeper_v1_ListTurnsRequest, callback: grpc.requestCallback<_turnkeeper_v1_ListTurnsResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * The graph called interrupt(): RUNNING -> PARKED. Publishes no terminal event.
   */
  ParkTurn(argument: _turnkeeper_v1_ParkTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ParkTurnResponse__Output>): grpc.ClientUnaryCall;
  ParkTurn(argument: _turnkeeper_v1_ParkTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ParkTurnResponse__Output>): grpc.ClientUnaryCall;
  ParkTurn(argument: _turnkeeper_v1_ParkTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ParkTurnResponse__Output>): grpc.ClientUnaryCall;
  ParkTurn(argument: _turnkeeper_v1_ParkTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_ParkTurnResponse__Output>): grpc.ClientUnaryCall;
  /**
   * The graph called interrupt(): RUNNING -> PARKED. Publishes no terminal event.
   */
  parkTurn(argument: _turnkeeper_v1_ParkTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ParkTurnResponse__Output>): grpc.ClientUnaryCall;
  parkTurn(argument: _turnkeeper_v1_ParkTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ParkTurnResponse__Output>): grpc.ClientUnaryCall;
  parkTurn(argument: _turnkeeper_v1_ParkTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ParkTurnResponse__Output>): grpc.ClientUnaryCall;
  parkTurn(argument: _turnkeeper_v1_ParkTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_ParkTurnResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Re-drive orphaned turns. Startup form (agent, replica, incarnation): every
   * RUNNING turn of that replica under another incarnation is re-driven and handed
   * to the caller. Operator form (turn_id, force): one turn, re-driven to any live
   * replica of its agent; refused while its owner holds a live lease unless force.
   */
  Redrive(argument: _turnkeeper_v1_RedriveRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_RedriveResponse__Output>): grpc.ClientUnaryCall;
  Redrive(argument: _turnkeeper_v1_RedriveRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_RedriveResponse__Output>): grpc.ClientUnaryCall;
  Redrive(argument: _turnkeeper_v1_RedriveRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_RedriveResponse__Output>): grpc.ClientUnaryCall;
  Redrive(argument: _turnkeeper_v1_RedriveRequest, callback: grpc.requestCallback<_turnkeeper_v1_RedriveResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Re-drive orphaned turns. Startup form (agent, replica, incarnation): every
   * RUNNING turn of that replica under another incarnation is re-driven and handed
   * to the caller. Operator form (turn_id, force): one turn, re-driven to any live
   * replica of its agent; refused while its owner holds a live lease unless force.
   */
  redrive(argument: _turnkeeper_v1_RedriveRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_RedriveResponse__Output>): grpc.ClientUnaryCall;
  redrive(argument: _turnkeeper_v1_RedriveRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_RedriveResponse__Output>): grpc.ClientUnaryCall;
  redrive(argument: _turnkeeper_v1_RedriveRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_RedriveResponse__Output>): grpc.ClientUnaryCall;
  redrive(argument: _turnkeeper_v1_RedriveRequest, callback: grpc.requestCallback<_turnkeeper_v1_RedriveResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * PARKED -> RUNNING with a resume value, then hand the turn to a live replica.
   * No rewind: nothing was lost on a park. A second call: FAILED_PRECONDITION.
   */
  ResumeDetached(argument: _turnkeeper_v1_ResumeDetachedRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ResumeDetachedResponse__Output>): grpc.ClientUnaryCall;
  ResumeDetached(argument: _turnkeeper_v1_ResumeDetachedRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ResumeDetachedResponse__Output>): grpc.ClientUnaryCall;
  ResumeDetached(argument: _turnkeeper_v1_ResumeDetachedRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ResumeDetachedResponse__Output>): grpc.ClientUnaryCall;
  ResumeDetached(argument: _turnkeeper_v1_ResumeDetachedRequest, callback: grpc.requestCallback<_turnkeeper_v1_ResumeDetachedResponse__Output>): grpc.ClientUnaryCall;
  /**
   * PARKED -> RUNNING with a resume value, then hand the turn to a live replica.
   * No rewind: nothing was lost on a park. A second call: FAILED_PRECONDITION.
   */
  resumeDetached(argument: _turnkeeper_v1_ResumeDetachedRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ResumeDetachedResponse__Output>): grpc.ClientUnaryCall;
  resumeDetached(argument: _turnkeeper_v1_ResumeDetachedRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_ResumeDetachedResponse__Output>): grpc.ClientUnaryCall;
  resumeDetached(argument: _turnkeeper_v1_ResumeDetachedRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_ResumeDetachedResponse__Output>): grpc.ClientUnaryCall;
  resumeDetached(argument: _turnkeeper_v1_ResumeDetachedRequest, callback: grpc.requestCallback<_turnkeeper_v1_ResumeDetachedResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Journal a new turn as RUNNING, owned by the calling executor. Idempotent by
   * turn_id for the same request; ALREADY_EXISTS for a different request;
   * FAILED_PRECONDITION while the thread has another RUNNING or PARKED turn.
   */
  StartTurn(argument: _turnkeeper_v1_StartTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_StartTurnResponse__Output>): grpc.ClientUnaryCall;
  StartTurn(argument: _turnkeeper_v1_StartTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_StartTurnResponse__Output>): grpc.ClientUnaryCall;
  StartTurn(argument: _turnkeeper_v1_StartTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_StartTurnResponse__Output>): grpc.ClientUnaryCall;
  StartTurn(argument: _turnkeeper_v1_StartTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_StartTurnResponse__Output>): grpc.ClientUnaryCall;
  /**
   * Journal a new turn as RUNNING, owned by the calling executor. Idempotent by
   * turn_id for the same request; ALREADY_EXISTS for a different request;
   * FAILED_PRECONDITION while the thread has another RUNNING or PARKED turn.
   */
  startTurn(argument: _turnkeeper_v1_StartTurnRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_StartTurnResponse__Output>): grpc.ClientUnaryCall;
  startTurn(argument: _turnkeeper_v1_StartTurnRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_StartTurnResponse__Output>): grpc.ClientUnaryCall;
  startTurn(argument: _turnkeeper_v1_StartTurnRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_StartTurnResponse__Output>): grpc.ClientUnaryCall;
  startTurn(argument: _turnkeeper_v1_StartTurnRequest, callback: grpc.requestCallback<_turnkeeper_v1_StartTurnResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * The status of a turn. Never NOT_FOUND: an id the journal never saw is UNKNOWN.
   */
  TurnStatus(argument: _turnkeeper_v1_TurnStatusRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_TurnStatusResponse__Output>): grpc.ClientUnaryCall;
  TurnStatus(argument: _turnkeeper_v1_TurnStatusRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_TurnStatusResponse__Output>): grpc.ClientUnaryCall;
  TurnStatus(argument: _turnkeeper_v1_TurnStatusRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_TurnStatusResponse__Output>): grpc.ClientUnaryCall;
  TurnStatus(argument: _turnkeeper_v1_TurnStatusRequest, callback: grpc.requestCallback<_turnkeeper_v1_TurnStatusResponse__Output>): grpc.ClientUnaryCall;
  /**
   * The status of a turn. Never NOT_FOUND: an id the journal never saw is UNKNOWN.
   */
  turnStatus(argument: _turnkeeper_v1_TurnStatusRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_TurnStatusResponse__Output>): grpc.ClientUnaryCall;
  turnStatus(argument: _turnkeeper_v1_TurnStatusRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_turnkeeper_v1_TurnStatusResponse__Output>): grpc.ClientUnaryCall;
  turnStatus(argument: _turnkeeper_v1_TurnStatusRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_turnkeeper_v1_TurnStatusResponse__Output>): grpc.ClientUnaryCall;
  turnStatus(argument: _turnkeeper_v1_TurnStatusRequest, callback: grpc.requestCallback<_turnkeeper_v1_TurnStatusResponse__Output>): grpc.ClientUnaryCall;
  
  /**
   * Replay the retained events after after_seq, then live ones. On a rewind:
   * a reset frame, then the turn's retained events from seq 1. Ends after the
   * terminal event.
   */
  WatchTurn(argument: _turnkeeper_v1_WatchTurnRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_turnkeeper_v1_WatchTurnResponse__Output>;
  WatchTurn(argument: _turnkeeper_v1_WatchTurnRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_turnkeeper_v1_WatchTurnResponse__Output>;
  /**
   * Replay the retained events after after_seq, then live ones. On a rewind:
   * a reset frame, then the turn's retained events from seq 1. Ends after the
   * terminal event.
   */
  watchTurn(argument: _turnkeeper_v1_WatchTurnRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_turnkeeper_v1_WatchTurnResponse__Output>;
  watchTurn(argument: _turnkeeper_v1_WatchTurnRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_turnkeeper_v1_WatchTurnResponse__Output>;
  
}

/**
 * TurnService owns the turn journal (turns.db): its state machine, the retained
 * events of every turn, and the outbox that mirrors both to NATS.
 */
export interface TurnServiceHandlers extends grpc.UntypedServiceImplementation {
  /**
   * Append a batch of events. Fenced by attempt; seqs must continue last_seq;
   * an event already stored with the same (attempt, seq) and content is skipped.
   */
  AppendEvents: grpc.handleUnaryCall<_turnkeeper_v1_AppendEventsRequest__Output, _turnkeeper_v1_AppendEventsResponse>;
  
  /**
   * RUNNING, PARKED or QUEUED -> CANCELLED. The service writes the terminal
   * turn.cancelled event, tells the replica running the turn to stop, and refuses
   * every later write of that execution (ABORTED). The thread's checkpoints stay
   * unless rollback is set. A turn already over: FAILED_PRECONDITION.
   */
  CancelTurn: grpc.handleUnaryCall<_turnkeeper_v1_CancelTurnRequest__Output, _turnkeeper_v1_CancelTurnResponse>;
  
  /**
   * Take over a RUNNING turn that has no owner (after a resume or a lease-expiry
   * re-drive was handed to this replica over NATS). Fenced by attempt.
   */
  ClaimTurn: grpc.handleUnaryCall<_turnkeeper_v1_ClaimTurnRequest__Output, _turnkeeper_v1_ClaimTurnResponse>;
  
  /**
   * RUNNING -> DONE or FAILED; the service appends the terminal event.
   */
  FinishTurn: grpc.handleUnaryCall<_turnkeeper_v1_FinishTurnRequest__Output, _turnkeeper_v1_FinishTurnResponse>;
  
  /**
   * The whole record of a turn; NOT_FOUND for an unknown id.
   */
  GetTurn: grpc.handleUnaryCall<_turnkeeper_v1_GetTurnRequest__Output, _turnkeeper_v1_GetTurnResponse>;
  
  /**
   * Renew the executor's lease on a RUNNING turn. Fenced by attempt and owner.
   */
  Heartbeat: grpc.handleUnaryCall<_turnkeeper_v1_HeartbeatRequest__Output, _turnkeeper_v1_HeartbeatResponse>;
  
  /**
   * The retained events of a turn, in seq order, paged.
   */
  ListEvents: grpc.handleUnaryCall<_turnkeeper_v1_ListEventsRequest__Output, _turnkeeper_v1_ListEventsResponse>;
  
  /**
   * Turns, newest first, filtered and paged.
   */
  ListTurns: grpc.handleUnaryCall<_turnkeeper_v1_ListTurnsRequest__Output, _turnkeeper_v1_ListTurnsResponse>;
  
  /**
   * The graph called interrupt(): RUNNING -> PARKED. Publishes no terminal event.
   */
  ParkTurn: grpc.handleUnaryCall<_turnkeeper_v1_ParkTurnRequest__Output, _turnkeeper_v1_ParkTurnResponse>;
  
  /**
   * Re-drive orphaned turns. Startup form (agent, replica, incarnation): every
   * RUNNING turn of that replica under another incarnation is re-driven and handed
   * to the caller. Operator form (turn_id, force): one turn, re-driven to any live
   * replica of its agent; refused while its owner holds a live lease unless force.
   */
  Redrive: grpc.handleUnaryCall<_turnkeeper_v1_RedriveRequest__Output, _turnkeeper_v1_RedriveResponse>;
  
  /**
   * PARKED -> RUNNING with a resume value, then hand the turn to a live replica.
   * No rewind: nothing was lost on a park. A second call: FAILED_PRECONDITION.
   */
  ResumeDetached: grpc.handleUnaryCall<_turnkeeper_v1_ResumeDetachedRequest__Output, _turnkeeper_v1_ResumeDetachedResponse>;
  
  /**
   * Journal a new turn as RUNNING, owned by the calling executor. Idempotent by
   * turn_id for the same request; ALREADY_EXISTS for a different request;
   * FAILED_PRECONDITION while the thread has another RUNNING or PARKED turn.
   */
  StartTurn: grpc.handleUnaryCall<_turnkeeper_v1_StartTurnRequest__Output, _turnkeeper_v1_StartTurnResponse>;
  
  /**
   * The status of a turn. Never NOT_FOUND: an id the journal never saw is UNKNOWN.
   */
  TurnStatus: grpc.handleUnaryCall<_turnkeeper_v1_TurnStatusRequest__Output, _turnkeeper_v1_TurnStatusResponse>;
  
  /**
   * Replay the retained events after after_seq, then live ones. On a rewind:
   * a reset frame, then the turn's retained events from seq 1. Ends after the
   * terminal event.
   */
  WatchTurn: grpc.handleServerStreamingCall<_turnkeeper_v1_WatchTurnRequest__Output, _turnkeeper_v1_WatchTurnResponse>;
  
}

export interface TurnServiceDefinition extends grpc.ServiceDefinition {
  AppendEvents: MethodDefinition<_turnkeeper_v1_AppendEventsRequest, _turnkeeper_v1_AppendEventsResponse, _turnkeeper_v1_AppendEventsRequest__Output, _turnkeeper_v1_AppendEventsResponse__Output>
  CancelTurn: MethodDefinition<_turnkeeper_v1_CancelTurnRequest, _turnkeeper_v1_CancelTurnResponse, _turnkeeper_v1_CancelTurnRequest__Output, _turnkeeper_v1_CancelTurnResponse__Output>
  ClaimTurn: MethodDefinition<_turnkeeper_v1_ClaimTurnRequest, _turnkeeper_v1_ClaimTurnResponse, _turnkeeper_v1_ClaimTurnRequest__Output, _turnkeeper_v1_ClaimTurnResponse__Output>
  FinishTurn: MethodDefinition<_turnkeeper_v1_FinishTurnRequest, _turnkeeper_v1_FinishTurnResponse, _turnkeeper_v1_FinishTurnRequest__Output, _turnkeeper_v1_FinishTurnResponse__Output>
  GetTurn: MethodDefinition<_turnkeeper_v1_GetTurnRequest, _turnkeeper_v1_GetTurnResponse, _turnkeeper_v1_GetTurnRequest__Output, _turnkeeper_v1_GetTurnResponse__Output>
  Heartbeat: MethodDefinition<_turnkeeper_v1_HeartbeatRequest, _turnkeeper_v1_HeartbeatResponse, _turnkeeper_v1_HeartbeatRequest__Output, _turnkeeper_v1_HeartbeatResponse__Output>
  ListEvents: MethodDefinition<_turnkeeper_v1_ListEventsRequest, _turnkeeper_v1_ListEventsResponse, _turnkeeper_v1_ListEventsRequest__Output, _turnkeeper_v1_ListEventsResponse__Output>
  ListTurns: MethodDefinition<_turnkeeper_v1_ListTurnsRequest, _turnkeeper_v1_ListTurnsResponse, _turnkeeper_v1_ListTurnsRequest__Output, _turnkeeper_v1_ListTurnsResponse__Output>
  ParkTurn: MethodDefinition<_turnkeeper_v1_ParkTurnRequest, _turnkeeper_v1_ParkTurnResponse, _turnkeeper_v1_ParkTurnRequest__Output, _turnkeeper_v1_ParkTurnResponse__Output>
  Redrive: MethodDefinition<_turnkeeper_v1_RedriveRequest, _turnkeeper_v1_RedriveResponse, _turnkeeper_v1_RedriveRequest__Output, _turnkeeper_v1_RedriveResponse__Output>
  ResumeDetached: MethodDefinition<_turnkeeper_v1_ResumeDetachedRequest, _turnkeeper_v1_ResumeDetachedResponse, _turnkeeper_v1_ResumeDetachedRequest__Output, _turnkeeper_v1_ResumeDetachedResponse__Output>
  StartTurn: MethodDefinition<_turnkeeper_v1_StartTurnRequest, _turnkeeper_v1_StartTurnResponse, _turnkeeper_v1_StartTurnRequest__Output, _turnkeeper_v1_StartTurnResponse__Output>
  TurnStatus: MethodDefinition<_turnkeeper_v1_TurnStatusRequest, _turnkeeper_v1_TurnStatusResponse, _turnkeeper_v1_TurnStatusRequest__Output, _turnkeeper_v1_TurnStatusResponse__Output>
  WatchTurn: MethodDefinition<_turnkeeper_v1_WatchTurnRequest, _turnkeeper_v1_WatchTurnResponse, _turnkeeper_v1_WatchTurnRequest__Output, _turnkeeper_v1_WatchTurnResponse__Output>
}
