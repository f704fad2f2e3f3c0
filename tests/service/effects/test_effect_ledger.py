"""The effect ledger's rules through the real gRPC service, on both backends: a
recorded outcome is answered RECORDED (the client never calls again), an intent
without an outcome is UNCERTAIN, a divergent call supersedes the recorded one (kept,
announced in the turn's events by the next checkpoint), a task's writes settle the
calls its re-execution did not make, and every write is fenced like the turn's."""

from __future__ import annotations

import json
from typing import Any, TypeAlias

import grpc
import pytest
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.retention import RetentionSweeper

from tests.support.service import expect_code
from tests.support.turns import start

Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"
Checkpoints: TypeAlias = "checkpoints_pb2_grpc.CheckpointServiceAsyncStub"

pytestmark = [pytest.mark.both_backends, pytest.mark.unrenewed]


def call(
    key: str = "k1",
    *,
    attempt: int = 0,
    args: dict[str, Any] | None = None,
    policy: pb.EffectPolicy.ValueType = pb.EFFECT_POLICY_RETRY,
    task_id: str = "task-1",
    turn_id: str = "t1",
) -> pb.EffectCall:
    return pb.EffectCall(
        turn_id=turn_id,
        attempt=attempt,
        key=key,
        name="send_invoice",
        args_json=json.dumps(args if args is not None else {"order": 7}),
        policy=policy,
        task_id=task_id,
        checkpoint_id="cp-0",
        call_index=0,
    )


async def begin(turns: Stub, c: pb.EffectCall, intent: bool = False) -> pb.BeginEffectResponse:
    return await turns.BeginEffect(pb.BeginEffectRequest(call=c, record_intent=intent))


async def record(
    turns: Stub,
    c: pb.EffectCall,
    outcome: Any,
    *,
    key: str = "",
    state: pb.EffectState.ValueType = pb.EFFECT_STATE_DONE,
) -> pb.Effect:
    request = pb.RecordEffectRequest(
        call=c, key=key or c.key, state=state, outcome_json=json.dumps(outcome)
    )
    return (await turns.RecordEffect(request)).effect


async def effects(turns: Stub, turn_id: str = "t1") -> list[pb.Effect]:
    return list((await turns.ListEffects(pb.ListEffectsRequest(turn_id=turn_id))).effects)


async def redrive(turns: Stub, turn_id: str = "t1") -> None:
    """A re-drive as after a crash: attempt + 1, claimed by a new incarnation."""
    redriven = await turns.Redrive(pb.RedriveRequest(turn_id=turn_id, force=True))
    attempt = redriven.turns[0].turn.attempts
    await turns.ClaimTurn(
        pb.ClaimTurnRequest(turn_id=turn_id, attempt=attempt, replica="r1", incarnation="i2")
    )


async def put_checkpoint(checkpoints: Checkpoints, checkpoint_id: str, attempt: int) -> None:
    await checkpoints.PutCheckpoint(
        cpb.PutCheckpointRequest(
            thread_id="th1",
            checkpoint_id=checkpoint_id,
            checkpoint=cpb.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
            fence=cpb.TurnFence(turn_id="t1", attempt=attempt),
        )
    )


async def put_writes(
    checkpoints: Checkpoints, attempt: int, made: list[str], channel: str = "messages"
) -> None:
    await checkpoints.PutWrites(
        cpb.PutWritesRequest(
            thread_id="th1",
            checkpoint_id="cp-0",
            task_id="task-1",
            writes=[cpb.WriteInput(idx=0, channel=channel, value=cpb.TypedValue(type="json"))],
            fence=cpb.TurnFence(turn_id="t1", attempt=attempt),
            settle_effects=True,
            effect_keys=made,
        )
    )


async def event_types(turns: Stub) -> list[tuple[str, dict[str, Any]]]:
    listed = await turns.ListEvents(pb.ListEventsRequest(turn_id="t1"))
    return [(e.type, json.loads(e.data_json)) for e in listed.events]


async def test_a_recorded_outcome_is_answered_without_a_call_across_a_redrive(
    turns: Stub,
) -> None:
    await start(turns)
    first = await begin(turns, call())
    assert first.decision == pb.EFFECT_DECISION_RUN
    assert first.effect.key == "k1"
    # A retry records no intent: nothing is in the ledger until the outcome is.
    assert await effects(turns) == []
    done = await record(turns, call(), {"invoice": "inv-1"})
    assert (done.state, json.loads(done.outcome_json)) == (
        pb.EFFECT_STATE_DONE,
        {"invoice": "inv-1"},
    )

    await redrive(turns)
    again = await begin(turns, call(attempt=1))
    assert again.decision == pb.EFFECT_DECISION_RECORDED
    assert json.loads(again.effect.outcome_json) == {"invoice": "inv-1"}
    assert again.effect.attempt == 0  # the attempt that recorded it
    # The same record again is harmless; another outcome is refused.
    await record(turns, call(attempt=1), {"invoice": "inv-1"})
    message = await expect_code(
        record(turns, call(attempt=1), {"invoice": "inv-2"}), grpc.StatusCode.FAILED_PRECONDITION
    )
    assert "already has its outcome recorded" in message


async def test_a_recorded_error_is_answered_as_recorded(turns: Stub) -> None:
    await start(turns)
    error = {"type": "CardDeclined", "message": "declined"}
    await record(turns, call(), error, state=pb.EFFECT_STATE_FAILED)
    answer = await begin(turns, call())
    assert answer.decision == pb.EFFECT_DECISION_RECORDED
    assert answer.effect.state == pb.EFFECT_STATE_FAILED
    assert json.loads(answer.effect.outcome_json) == error


async def test_different_keys_are_different_calls(turns: Stub) -> None:
    await start(turns)
    await record(turns, call("k1"), 1)
    assert (await begin(turns, call("k2"))).decision == pb.EFFECT_DECISION_RUN
    await record(turns, call("k2"), 2)
    assert [(e.key, e.outcome_json) for e in await effects(turns)] == [("k1", "1"), ("k2", "2")]


async def test_an_intent_without_an_outcome_is_uncertain_after_a_redrive(turns: Stub) -> None:
    await start(turns)
    park = call(policy=pb.EFFECT_POLICY_PARK)
    first = await begin(turns, park, intent=True)
    assert first.decision == pb.EFFECT_DECISION_RUN
    [row] = await effects(turns)
    assert (row.state, row.policy) == (pb.EFFECT_STATE_INTENT, pb.EFFECT_POLICY_PARK)

    await redrive(turns)
    again = await begin(turns, call(attempt=1, policy=pb.EFFECT_POLICY_PARK), intent=True)
    assert again.decision == pb.EFFECT_DECISION_UNCERTAIN
    assert again.effect.attempt == 0
    # An operator's answer "it happened" resolves it with the result they gave.
    resolved = await record(
        turns,
        call(attempt=1, policy=pb.EFFECT_POLICY_PARK),
        {"sent": True},
        state=pb.EFFECT_STATE_RESOLVED,
    )
    assert (resolved.state, resolved.attempt) == (pb.EFFECT_STATE_RESOLVED, 1)
    answer = await begin(turns, call(attempt=1, policy=pb.EFFECT_POLICY_PARK), intent=True)
    assert answer.decision == pb.EFFECT_DECISION_RECORDED
    assert json.loads(answer.effect.outcome_json) == {"sent": True}


async def test_only_an_uncertain_effect_is_resolved(turns: Stub) -> None:
    await start(turns)
    message = await expect_code(
        record(turns, call(), {"sent": True}, state=pb.EFFECT_STATE_RESOLVED),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "no recorded intent" in message


async def test_a_stale_attempt_cannot_begin_or_record(turns: Stub) -> None:
    await start(turns)
    await begin(turns, call(), intent=True)
    await redrive(turns)
    stale = (
        begin(turns, call(), intent=True),
        begin(turns, call()),  # a retry's begin is a read, fenced all the same
        record(turns, call(), "late"),
    )
    for attempt_call in stale:
        message = await expect_code(attempt_call, grpc.StatusCode.ABORTED)
        assert "re-driven away" in message
    [row] = await effects(turns)
    assert (row.state, row.outcome_json) == (pb.EFFECT_STATE_INTENT, "")


async def test_other_arguments_supersede_the_recorded_call_and_the_checkpoint_says_so(
    turns: Stub, checkpoints: Checkpoints
) -> None:
    await start(turns)
    await record(turns, call(args={"order": 7}), "inv-1")
    await redrive(turns)
    answer = await begin(turns, call(attempt=1, args={"order": 8}))
    # A new key: a receiver deduplicating by key must not take it for the old call.
    assert (answer.decision, answer.effect.key) == (pb.EFFECT_DECISION_RUN, "k1~1")
    await record(turns, call(attempt=1, args={"order": 8}), "inv-2", key="k1~1")
    old, new = await effects(turns)
    assert (old.key, old.state, old.outcome_json) == ("k1", pb.EFFECT_STATE_SUPERSEDED, '"inv-1"')
    assert "other arguments" in old.detail
    assert (new.key, new.state) == ("k1~1", pb.EFFECT_STATE_DONE)
    # Argument order does not matter: the ledger compares canonical JSON.
    same = await begin(turns, call(attempt=1, args={"order": 8}))
    assert (same.decision, same.effect.key) == (pb.EFFECT_DECISION_RECORDED, "k1~1")

    assert await event_types(turns) == []
    await put_checkpoint(checkpoints, "cp-1", attempt=1)
    [(kind, data)] = await event_types(turns)
    assert kind == "effect.superseded"
    assert (data["key"], data["name"], data["args"], data["outcome"]) == (
        "k1",
        "send_invoice",
        {"order": 7},
        "inv-1",
    )
    # Announced once: the next checkpoint adds nothing.
    await put_checkpoint(checkpoints, "cp-2", attempt=1)
    assert len(await event_types(turns)) == 1


async def test_a_task_s_writes_supersede_the_calls_its_re_execution_did_not_make(
    turns: Stub, checkpoints: Checkpoints
) -> None:
    await start(turns)
    await record(turns, call("k1"), "one")
    await record(turns, call("k2"), "two")
    await record(turns, call("other", task_id="task-2"), "three")
    await redrive(turns)
    assert (await begin(turns, call("k1", attempt=1))).decision == pb.EFFECT_DECISION_RECORDED
    # A task that parks (an interrupt) or raised (an error, before it made k2 again)
    # has not finished: nothing is settled.
    for unfinished in ("__interrupt__", "__error__"):
        await put_writes(checkpoints, attempt=1, made=["k1"], channel=unfinished)
        assert {e.key: e.state for e in await effects(turns)}["k2"] == pb.EFFECT_STATE_DONE
    await put_writes(checkpoints, attempt=1, made=["k1"])
    states = {e.key: (e.state, e.detail) for e in await effects(turns)}
    assert states["k1"][0] == pb.EFFECT_STATE_DONE
    assert states["k2"][0] == pb.EFFECT_STATE_SUPERSEDED
    assert "not made again" in states["k2"][1]
    assert states["other"][0] == pb.EFFECT_STATE_DONE  # another task's call
    await put_checkpoint(checkpoints, "cp-1", attempt=1)
    assert [(t, d["key"]) for t, d in await event_types(turns)] == [("effect.superseded", "k2")]


async def test_a_checkpoint_that_announces_answers_the_seq_its_writer_continues_after(
    turns: Stub, checkpoints: Checkpoints
) -> None:
    """The service and the executor write one turn's events (issue 46): the
    checkpoint's answer says where the executor's next event goes."""
    await start(turns)
    await record(turns, call(args={"order": 7}), "inv-1")
    await redrive(turns)
    await begin(turns, call(attempt=1, args={"order": 8}))  # supersedes k1

    def event(seq: int) -> pb.EventInput:
        return pb.EventInput(seq=seq, type="step", data_json=json.dumps({"n": seq}))

    await turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=1, events=[event(1)]))
    answer = await checkpoints.PutCheckpoint(
        cpb.PutCheckpointRequest(
            thread_id="th1",
            checkpoint_id="cp-1",
            checkpoint=cpb.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
            fence=cpb.TurnFence(turn_id="t1", attempt=1),
        )
    )
    # The announcement took seq 2: the executor goes on at 3.
    assert answer.last_seq == 2
    assert [t for t, _ in await event_types(turns)] == ["step", "effect.superseded"]
    await expect_code(
        turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=1, events=[event(2)])),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    appended = await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=1, events=[event(3)])
    )
    assert appended.last_seq == 3
    # Nothing more to announce: the next checkpoint's boundary is the last event.
    answer = await checkpoints.PutCheckpoint(
        cpb.PutCheckpointRequest(
            thread_id="th1",
            checkpoint_id="cp-2",
            parent_checkpoint_id="cp-1",
            checkpoint=cpb.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
            fence=cpb.TurnFence(turn_id="t1", attempt=1),
        )
    )
    assert answer.last_seq == 3


async def test_a_stale_attempt_s_writes_settle_nothing(
    turns: Stub, checkpoints: Checkpoints
) -> None:
    await start(turns)
    await record(turns, call("k1"), "one")
    await redrive(turns)
    await expect_code(put_writes(checkpoints, attempt=0, made=[]), grpc.StatusCode.ABORTED)
    [row] = await effects(turns)
    assert row.state == pb.EFFECT_STATE_DONE


async def test_effects_are_pruned_with_the_turn_s_retention(
    turns: Stub, service: TurnkeeperServer
) -> None:
    await start(turns)
    await record(turns, call(), "inv-1")
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE))
    sweeper = RetentionSweeper(service.db, service.policy, 0.001, 3600.0)
    young = RetentionSweeper(service.db, service.policy, 3600.0, 3600.0)
    await young.sweep()
    assert len(await effects(turns)) == 1  # younger than the retention: kept
    await sweeper.sweep()
    assert await effects(turns) == []
    # The turn's record still answers; its ledger went with its events.
    assert (await turns.GetTurn(pb.GetTurnRequest(turn_id="t1"))).turn.state == pb.TURN_STATE_DONE


async def test_list_effects_pages_and_refuses_an_unknown_turn(turns: Stub) -> None:
    await start(turns)
    for n in range(5):
        await record(turns, call(f"k{n}"), n)
    first = await turns.ListEffects(pb.ListEffectsRequest(turn_id="t1", page_size=3))
    assert [e.key for e in first.effects] == ["k0", "k1", "k2"] and first.next_page_token
    rest = await turns.ListEffects(
        pb.ListEffectsRequest(turn_id="t1", page_size=3, page_token=first.next_page_token)
    )
    assert [e.key for e in rest.effects] == ["k3", "k4"] and not rest.next_page_token
    await expect_code(
        turns.ListEffects(pb.ListEffectsRequest(turn_id="nope")), grpc.StatusCode.NOT_FOUND
    )


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"policy": pb.EFFECT_POLICY_UNSPECIFIED}, "policy must be RETRY, PARK or FAIL"),
        ({"key": "a~1"}, "characters outside"),
        ({"key": ""}, "call.key"),
        ({"name": ""}, "call.name"),
        ({"args_json": "{not json"}, "call.args_json"),
    ],
)
async def test_bad_calls_are_invalid_argument(
    turns: Stub, change: dict[str, Any], words: str
) -> None:
    await start(turns)
    bad = call()
    for field, value in change.items():
        setattr(bad, field, value)
    message = await expect_code(begin(turns, bad), grpc.StatusCode.INVALID_ARGUMENT)
    assert words in message


async def test_an_outcome_is_recorded_only_under_a_key_begin_can_answer(turns: Stub) -> None:
    await start(turns)
    for wrong in ("other", "k1~x", "k1~"):
        message = await expect_code(
            record(turns, call(), "r", key=wrong), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "is not one BeginEffect gives" in message
    assert await effects(turns) == []
