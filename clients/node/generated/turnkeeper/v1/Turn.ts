// Original file: ../../protos/turnkeeper/v1/turns.proto

import type { TurnState as _turnkeeper_v1_TurnState, TurnState__Output as _turnkeeper_v1_TurnState__Output } from '../../turnkeeper/v1/TurnState';
import type { Value as _google_protobuf_Value, Value__Output as _google_protobuf_Value__Output } from '../../google/protobuf/Value';
import type { Owner as _turnkeeper_v1_Owner, Owner__Output as _turnkeeper_v1_Owner__Output } from '../../turnkeeper/v1/Owner';
import type { Timestamp as _google_protobuf_Timestamp, Timestamp__Output as _google_protobuf_Timestamp__Output } from '../../google/protobuf/Timestamp';
import type { Long } from '@grpc/proto-loader';

export interface Turn {
  'turnId'?: (string);
  'threadId'?: (string);
  'agent'?: (string);
  'state'?: (_turnkeeper_v1_TurnState);
  /**
   * Re-drives so far: 0 while the first execution runs.
   */
  'attempts'?: (number);
  /**
   * The seq of the newest retained event.
   */
  'lastSeq'?: (number | string | Long);
  'input'?: (_google_protobuf_Value | null);
  /**
   * Unset while no executor holds the turn.
   */
  'owner'?: (_turnkeeper_v1_Owner | null);
  /**
   * The value the graph passed to interrupt(), while PARKED.
   */
  'interrupt'?: (_google_protobuf_Value | null);
  /**
   * The value given to ResumeDetached, until the turn ends.
   */
  'resume'?: (_google_protobuf_Value | null);
  'hasResume'?: (boolean);
  'error'?: (string);
  /**
   * How many times the turn's event stream was rewound.
   */
  'rewinds'?: (number);
  'createdAt'?: (_google_protobuf_Timestamp | null);
  'updatedAt'?: (_google_protobuf_Timestamp | null);
  /**
   * Why the turn ended when the service ended it: "cancelled", "max_run_time",
   * "park_expired", "redrive_cap"; empty while it runs or when its executor ended it.
   */
  'endReason'?: (string);
  /**
   * When the reaper fails the turn if it is still RUNNING (max run time).
   */
  'runDeadline'?: (_google_protobuf_Timestamp | null);
  /**
   * When the reaper fails the turn if it is still PARKED (park expiry).
   */
  'parkDeadline'?: (_google_protobuf_Timestamp | null);
  /**
   * Crashes of its executor charged to this turn, counted against the re-drive cap
   * (a crash of a process running several turns is charged only once the culprit
   * is known: see docs/decisions.md, poison containment).
   */
  'crashesCharged'?: (number);
}

export interface Turn__Output {
  'turnId': (string);
  'threadId': (string);
  'agent': (string);
  'state': (_turnkeeper_v1_TurnState__Output);
  /**
   * Re-drives so far: 0 while the first execution runs.
   */
  'attempts': (number);
  /**
   * The seq of the newest retained event.
   */
  'lastSeq': (number);
  'input': (_google_protobuf_Value__Output | null);
  /**
   * Unset while no executor holds the turn.
   */
  'owner': (_turnkeeper_v1_Owner__Output | null);
  /**
   * The value the graph passed to interrupt(), while PARKED.
   */
  'interrupt': (_google_protobuf_Value__Output | null);
  /**
   * The value given to ResumeDetached, until the turn ends.
   */
  'resume': (_google_protobuf_Value__Output | null);
  'hasResume': (boolean);
  'error': (string);
  /**
   * How many times the turn's event stream was rewound.
   */
  'rewinds': (number);
  'createdAt': (_google_protobuf_Timestamp__Output | null);
  'updatedAt': (_google_protobuf_Timestamp__Output | null);
  /**
   * Why the turn ended when the service ended it: "cancelled", "max_run_time",
   * "park_expired", "redrive_cap"; empty while it runs or when its executor ended it.
   */
  'endReason': (string);
  /**
   * When the reaper fails the turn if it is still RUNNING (max run time).
   */
  'runDeadline': (_google_protobuf_Timestamp__Output | null);
  /**
   * When the reaper fails the turn if it is still PARKED (park expiry).
   */
  'parkDeadline': (_google_protobuf_Timestamp__Output | null);
  /**
   * Crashes of its executor charged to this turn, counted against the re-drive cap
   * (a crash of a process running several turns is charged only once the culprit
   * is known: see docs/decisions.md, poison containment).
   */
  'crashesCharged': (number);
}
