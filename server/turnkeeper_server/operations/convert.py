"""Journal records to protobuf messages, and protobuf JSON values to text."""

from __future__ import annotations

import json

from google.protobuf import json_format, struct_pb2, timestamp_pb2
from turnkeeper.states import JOURNAL_STATES
from turnkeeper.v1 import turns_pb2

from turnkeeper_server.journal.versions import Requirement
from turnkeeper_server.records import EffectRecord, EventRecord, TurnRecord

STATE_TO_PROTO = {state.value: state.proto for state in JOURNAL_STATES}
PROTO_TO_STATE = {v: k for k, v in STATE_TO_PROTO.items()}


def timestamp(seconds: float) -> timestamp_pb2.Timestamp:
    ts = timestamp_pb2.Timestamp()
    ts.FromNanoseconds(int(seconds * 1e9))
    return ts


def value_to_json(value: struct_pb2.Value) -> str:
    """A google.protobuf.Value as compact JSON text (an unset Value is null), with
    object keys sorted: a Struct's field order is a map's, which differs from one
    process to the next, and StartTurn's idempotency compares a hash of this text."""
    if value.WhichOneof("kind") is None:
        return "null"
    return json.dumps(json_format.MessageToDict(value), separators=(",", ":"), sort_keys=True)


def json_to_value(text: str) -> struct_pb2.Value:
    value = struct_pb2.Value()
    json_format.Parse(text, value)
    return value


def turn_to_proto(
    turn: TurnRecord, detail: str = "", waiting_for: Requirement | None = None
) -> turns_pb2.Turn:
    """The Turn message; `detail` and `waiting_for` are the engine's (Turns.explain),
    where the RPC gives them."""
    msg = turns_pb2.Turn(
        detail=detail,
        turn_id=turn.turn_id,
        thread_id=turn.thread_id,
        agent=turn.agent,
        state=STATE_TO_PROTO[turn.state],
        attempts=turn.attempts,
        last_seq=turn.last_seq,
        error=turn.error,
        rewinds=turn.rewinds,
        has_resume=turn.resume_json is not None,
        created_at=timestamp(turn.created_at),
        updated_at=timestamp(turn.updated_at),
        end_reason=turn.end_reason,
        crashes_charged=turn.charged,
    )
    if turn.graph_fingerprint:
        msg.graph.fingerprint = turn.graph_fingerprint
        msg.graph.label = turn.graph_label
    if waiting_for is not None:
        msg.waiting_for.CopyFrom(version_ref(waiting_for.fingerprint, waiting_for.label))
    if turn.run_deadline_at is not None:
        msg.run_deadline.CopyFrom(timestamp(turn.run_deadline_at))
    if turn.park_deadline_at is not None:
        msg.park_deadline.CopyFrom(timestamp(turn.park_deadline_at))
    msg.input.CopyFrom(json_to_value(turn.input_json))
    if turn.owner_replica is not None:
        msg.owner.replica = turn.owner_replica
        msg.owner.incarnation = turn.owner_incarnation or ""
        if turn.lease_expires_at is not None:
            msg.owner.lease_expires_at.CopyFrom(timestamp(turn.lease_expires_at))
    if turn.interrupt_json is not None:
        msg.interrupt.CopyFrom(json_to_value(turn.interrupt_json))
    if turn.resume_json is not None:
        msg.resume.CopyFrom(json_to_value(turn.resume_json))
    return msg


def version_ref(fingerprint: str, label: str) -> turns_pb2.GraphVersionRef:
    return turns_pb2.GraphVersionRef(fingerprint=fingerprint, label=label)


def event_to_proto(event: EventRecord) -> turns_pb2.Event:
    return turns_pb2.Event(
        seq=event.seq,
        attempt=event.attempt,
        type=event.type,
        data_json=event.data_json,
        created_at=timestamp(event.created_at),
    )


EFFECT_STATE_TO_PROTO = {
    "INTENT": turns_pb2.EFFECT_STATE_INTENT,
    "DONE": turns_pb2.EFFECT_STATE_DONE,
    "FAILED": turns_pb2.EFFECT_STATE_FAILED,
    "RESOLVED": turns_pb2.EFFECT_STATE_RESOLVED,
    "SUPERSEDED": turns_pb2.EFFECT_STATE_SUPERSEDED,
}
EFFECT_POLICY_TO_PROTO = {
    "retry": turns_pb2.EFFECT_POLICY_RETRY,
    "park": turns_pb2.EFFECT_POLICY_PARK,
    "fail": turns_pb2.EFFECT_POLICY_FAIL,
}
PROTO_TO_EFFECT_POLICY = {v: k for k, v in EFFECT_POLICY_TO_PROTO.items()}


def effect_to_proto(effect: EffectRecord) -> turns_pb2.Effect:
    return turns_pb2.Effect(
        turn_id=effect.turn_id,
        key=effect.effect_key,
        name=effect.name,
        args_json=effect.args_json,
        policy=EFFECT_POLICY_TO_PROTO[effect.policy],
        state=EFFECT_STATE_TO_PROTO[effect.state],
        outcome_json=effect.outcome_json,
        attempt=effect.attempt,
        task_id=effect.task_id,
        checkpoint_id=effect.checkpoint_id,
        call_index=effect.call_index,
        detail=effect.detail,
        created_at=timestamp(effect.created_at),
        updated_at=timestamp(effect.updated_at),
    )
