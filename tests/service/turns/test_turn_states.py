"""Every transition of the turn state machine, and every refused one, with its code."""

from __future__ import annotations

from typing import TypeAlias

import grpc
import pytest
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc

from tests.support.service import expect_code
from tests.support.turns import events, start, status, value

# The async stub type exists only in the generated .pyi (an aio channel makes one).
Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"
FP = grpc.StatusCode.FAILED_PRECONDITION

pytestmark = pytest.mark.both_backends


async def test_start_journals_a_running_turn_owned_by_the_caller(turns: Stub) -> None:
    resp = await start(turns, input={"q": "hi"})
    assert resp.created
    t = resp.turn
    assert (t.state, t.attempts, t.last_seq) == (pb.TURN_STATE_RUNNING, 0, 0)
    assert (t.owner.replica, t.owner.incarnation) == ("r1", "i1")
    got = await turns.GetTurn(pb.GetTurnRequest(turn_id="t1"))
    assert got.turn.input.struct_value["q"] == "hi"


async def test_start_is_idempotent_for_the_same_request(turns: Stub) -> None:
    await start(turns)
    again = await start(turns)
    assert not again.created
    assert again.turn.state == pb.TURN_STATE_RUNNING


async def test_start_with_same_id_and_different_request_is_already_exists(turns: Stub) -> None:
    await start(turns)
    msg = await expect_code(start(turns, input={"q": "other"}), grpc.StatusCode.ALREADY_EXISTS)
    assert "t1" in msg


async def test_one_live_turn_per_thread(turns: Stub) -> None:
    await start(turns, turn_id="a")
    msg = await expect_code(start(turns, turn_id="b"), FP)
    assert "'a'" in msg
    # Parked still counts as live.
    await turns.ParkTurn(pb.ParkTurnRequest(turn_id="a", attempt=0, interrupt=value("?")))
    await expect_code(start(turns, turn_id="b"), FP)
    # Once the first ends, the thread is free.
    await turns.ResumeDetached(pb.ResumeDetachedRequest(turn_id="a", resume=value(True)))
    claim = pb.ClaimTurnRequest(turn_id="a", attempt=0, replica="r1", incarnation="i1")
    await turns.ClaimTurn(claim)
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="a", attempt=0, outcome=pb.OUTCOME_DONE))
    assert (await start(turns, turn_id="b")).created


async def test_finish_done_appends_the_terminal_event(turns: Stub) -> None:
    await start(turns)
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "step", "final"))
    )
    resp = await turns.FinishTurn(
        pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE)
    )
    assert resp.turn.state == pb.TURN_STATE_DONE
    assert resp.turn.last_seq == 3
    listed = await turns.ListEvents(pb.ListEventsRequest(turn_id="t1"))
    assert [e.type for e in listed.events] == ["step", "final", "turn.done"]
    # A finished turn takes no more writes.
    await expect_code(
        turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(4, "x"))),
        FP,
    )
    await expect_code(
        turns.FinishTurn(pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE)), FP
    )
    await expect_code(turns.ParkTurn(pb.ParkTurnRequest(turn_id="t1", attempt=0)), FP)


async def test_finish_failed_needs_an_error_and_records_it(turns: Stub) -> None:
    await start(turns)
    req = pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_FAILED)
    await expect_code(turns.FinishTurn(req), grpc.StatusCode.INVALID_ARGUMENT)
    req.error = "tool exploded"
    resp = await turns.FinishTurn(req)
    assert (resp.turn.state, resp.turn.error) == (pb.TURN_STATE_FAILED, "tool exploded")
    st = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))
    assert (st.state, st.error) == (pb.TURN_STATE_FAILED, "tool exploded")
    listed = await turns.ListEvents(pb.ListEventsRequest(turn_id="t1"))
    assert [e.type for e in listed.events] == ["turn.failed"]


async def test_park_then_resume_once(turns: Stub) -> None:
    await start(turns)
    parked = await turns.ParkTurn(
        pb.ParkTurnRequest(
            turn_id="t1", attempt=0, interrupt=value({"ask": "ok?"}), events=events(1, "interrupt")
        )
    )
    assert parked.turn.state == pb.TURN_STATE_PARKED
    assert parked.turn.interrupt.struct_value["ask"] == "ok?"
    assert not parked.turn.HasField("owner")
    listed = await turns.ListEvents(pb.ListEventsRequest(turn_id="t1"))
    assert [e.type for e in listed.events] == ["interrupt"]  # no terminal event
    assert await status(turns, "t1") == pb.TURN_STATE_PARKED

    resumed = await turns.ResumeDetached(
        pb.ResumeDetachedRequest(turn_id="t1", resume=value({"approved": True}))
    )
    assert resumed.turn.state == pb.TURN_STATE_RUNNING
    assert resumed.turn.has_resume and resumed.turn.resume.struct_value["approved"] is True
    assert resumed.turn.attempts == 0 and resumed.turn.rewinds == 0  # no rewind on resume
    assert not resumed.dispatched  # no replica is listening
    msg = await expect_code(
        turns.ResumeDetached(pb.ResumeDetachedRequest(turn_id="t1", resume=value(1))), FP
    )
    assert "already resumed" in msg


async def test_resume_of_a_running_or_unknown_turn_is_refused(turns: Stub) -> None:
    await start(turns)
    await expect_code(turns.ResumeDetached(pb.ResumeDetachedRequest(turn_id="t1")), FP)
    await expect_code(
        turns.ResumeDetached(pb.ResumeDetachedRequest(turn_id="nope")), grpc.StatusCode.NOT_FOUND
    )


async def test_claim_after_resume_fences_other_replicas(turns: Stub) -> None:
    await start(turns)
    await turns.ParkTurn(pb.ParkTurnRequest(turn_id="t1", attempt=0))
    await turns.ResumeDetached(pb.ResumeDetachedRequest(turn_id="t1", resume=value("go")))
    claimed = await turns.ClaimTurn(
        pb.ClaimTurnRequest(turn_id="t1", attempt=0, replica="r2", incarnation="x")
    )
    assert claimed.turn.owner.replica == "r2"
    await expect_code(
        turns.ClaimTurn(
            pb.ClaimTurnRequest(turn_id="t1", attempt=0, replica="r3", incarnation="y")
        ),
        grpc.StatusCode.ABORTED,
    )
    # The claimer heartbeats; somebody else cannot.
    await turns.Heartbeat(
        pb.HeartbeatRequest(turn_id="t1", attempt=0, replica="r2", incarnation="x")
    )
    await expect_code(
        turns.Heartbeat(
            pb.HeartbeatRequest(turn_id="t1", attempt=0, replica="r1", incarnation="i1")
        ),
        grpc.StatusCode.ABORTED,
    )


async def test_startup_redrive_orphans_turns_of_the_old_incarnation(turns: Stub) -> None:
    await start(turns, turn_id="mine", thread_id="a")
    await start(turns, turn_id="other-replica", thread_id="b", replica="r2")
    await start(turns, turn_id="other-agent", thread_id="c", agent="agent2")
    resp = await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    assert [r.turn.turn_id for r in resp.turns] == ["mine"]
    r = resp.turns[0]
    assert (r.turn.attempts, r.turn.rewinds, r.rewind_seq, r.checkpoint_id) == (1, 1, 0, "")
    assert (r.turn.owner.replica, r.turn.owner.incarnation) == ("r1", "i2")
    # The same incarnation asking again finds nothing: it owns the turn now.
    again = await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    assert list(again.turns) == []


async def test_stale_attempt_is_fenced_everywhere(turns: Stub) -> None:
    await start(turns)
    await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    aborted = grpc.StatusCode.ABORTED
    await expect_code(
        turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "x"))),
        aborted,
    )
    await expect_code(turns.ParkTurn(pb.ParkTurnRequest(turn_id="t1", attempt=0)), aborted)
    await expect_code(
        turns.FinishTurn(pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE)),
        aborted,
    )
    await expect_code(
        turns.Heartbeat(
            pb.HeartbeatRequest(turn_id="t1", attempt=0, replica="r1", incarnation="i1")
        ),
        aborted,
    )
    # The current attempt writes fine.
    ok = await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=1, events=events(1, "x"))
    )
    assert ok.last_seq == 1


async def test_redrive_cap_fails_the_turn_with_one_synthetic_terminal_event(turns: Stub) -> None:
    await start(turns)
    for n in range(1, 4):
        resp = await turns.Redrive(
            pb.RedriveRequest(agent="agent", replica="r1", incarnation=f"i{n + 1}")
        )
        assert resp.turns[0].turn.attempts == n and not resp.turns[0].failed_at_cap
    resp = await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i9"))
    r = resp.turns[0]
    assert r.failed_at_cap and r.turn.state == pb.TURN_STATE_FAILED and r.turn.attempts == 3
    assert (
        r.turn.error == "turn re-driven 3 times and orphaned again: the re-drive cap is 3 re-drives"
    )
    listed = await turns.ListEvents(pb.ListEventsRequest(turn_id="t1"))
    assert [e.type for e in listed.events] == ["turn.failed"]
    # Nothing re-drives a failed turn again.
    assert (
        list(
            (
                await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="z"))
            ).turns
        )
        == []
    )
    await expect_code(turns.Redrive(pb.RedriveRequest(turn_id="t1")), FP)


async def test_operator_redrive_respects_a_live_lease_unless_forced(turns: Stub) -> None:
    await start(turns)
    msg = await expect_code(turns.Redrive(pb.RedriveRequest(turn_id="t1")), FP)
    assert "force" in msg
    resp = await turns.Redrive(pb.RedriveRequest(turn_id="t1", force=True))
    assert resp.turns[0].turn.attempts == 1
    assert not resp.turns[0].turn.HasField("owner")
    assert not resp.dispatched


async def test_operator_redrive_of_parked_turn_points_at_resume(turns: Stub) -> None:
    await start(turns)
    await turns.ParkTurn(pb.ParkTurnRequest(turn_id="t1", attempt=0))
    msg = await expect_code(turns.Redrive(pb.RedriveRequest(turn_id="t1", force=True)), FP)
    assert "ResumeDetached" in msg


async def test_append_is_idempotent_by_seq_and_refuses_gaps(turns: Stub) -> None:
    await start(turns)
    batch = events(1, "token", "token")
    assert (
        await turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=batch))
    ).last_seq == 2
    # The same batch again: acknowledged, nothing doubled.
    assert (
        await turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=batch))
    ).last_seq == 2
    listed = await turns.ListEvents(pb.ListEventsRequest(turn_id="t1"))
    assert [e.seq for e in listed.events] == [1, 2]
    # A different event at a taken seq, or a gap, is refused.
    other = [pb.EventInput(seq=2, type="token", data_json='"different"')]
    await expect_code(
        turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=other)), FP
    )
    gap = events(5, "token")
    msg = await expect_code(
        turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=gap)), FP
    )
    assert "next seq is 3" in msg
    # A batch failing half-way leaves nothing behind.
    mixed = [*events(3, "token"), *events(5, "token")]
    await expect_code(
        turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=mixed)), FP
    )
    assert (await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))).last_seq == 2


async def test_list_turns_filters_and_pages(turns: Stub) -> None:
    for i in range(5):
        await start(turns, turn_id=f"t{i}", thread_id=f"th{i}", agent="a" if i % 2 else "b")
    await turns.ParkTurn(pb.ParkTurnRequest(turn_id="t0", attempt=0))
    page1 = await turns.ListTurns(pb.ListTurnsRequest(page_size=2))
    assert [t.turn_id for t in page1.turns] == ["t4", "t3"] and page1.next_page_token
    page2 = await turns.ListTurns(
        pb.ListTurnsRequest(page_size=2, page_token=page1.next_page_token)
    )
    page3 = await turns.ListTurns(
        pb.ListTurnsRequest(page_size=2, page_token=page2.next_page_token)
    )
    assert [t.turn_id for t in page2.turns] == ["t2", "t1"]
    assert [t.turn_id for t in page3.turns] == ["t0"] and not page3.next_page_token
    by_agent = await turns.ListTurns(pb.ListTurnsRequest(agent="a"))
    assert {t.turn_id for t in by_agent.turns} == {"t1", "t3"}
    parked = await turns.ListTurns(pb.ListTurnsRequest(state=pb.TURN_STATE_PARKED))
    assert [t.turn_id for t in parked.turns] == ["t0"]
    by_thread = await turns.ListTurns(pb.ListTurnsRequest(thread_id="th2"))
    assert [t.turn_id for t in by_thread.turns] == ["t2"]
    await expect_code(
        turns.ListTurns(pb.ListTurnsRequest(page_token="garbage")), grpc.StatusCode.INVALID_ARGUMENT
    )
