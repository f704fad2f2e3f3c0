"""Re-drive with events on both sides of a checkpoint boundary: the rewind on NATS,
the retained events, and a WatchTurn that sees RESET + replay, no duplicate, no gap."""

from __future__ import annotations

import json
from typing import Any, TypeAlias

import pytest
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.engine import watch

from tests.support.nats import subscribe
from tests.support.turns import events, start
from tests.support.watch import Watcher, seqs
from tests.support.watch import first_read as watch_first_read

pytestmark = [pytest.mark.both_backends, pytest.mark.unrenewed]

# The async stub type exists only in the generated .pyi (an aio channel makes one).
Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"


def put_checkpoint(turn_id: str, attempt: int, checkpoint_id: str) -> cpb.PutCheckpointRequest:
    return cpb.PutCheckpointRequest(
        thread_id="th1",
        checkpoint_id=checkpoint_id,
        checkpoint=cpb.TypedValue(type="json", data=b"{}"),
        metadata_json=json.dumps({"step": 1}),
        fence=cpb.TurnFence(turn_id=turn_id, attempt=attempt),
    )


async def test_redrive_rewinds_to_the_checkpoint_boundary(
    service: TurnkeeperServer,
    turns: Stub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    assert service.settings.nats_url is not None
    nc, rewinds = await subscribe(service.settings.nats_url, "vystak.turn.rewind")
    try:
        await start(turns)
        watcher = Watcher()
        watcher.start(turns, "t1")
        # Three events, then a checkpoint (boundary 3), then two more that the crash loses.
        await turns.AppendEvents(
            pb.AppendEventsRequest(
                turn_id="t1", attempt=0, events=events(1, "step", "token", "tool_call_start")
            )
        )
        await checkpoints.PutCheckpoint(put_checkpoint("t1", 0, "1ef-0001"))
        await turns.AppendEvents(
            pb.AppendEventsRequest(
                turn_id="t1", attempt=0, events=events(4, "tool_call_end", "token")
            )
        )
        await watcher.wait_for(lambda: len(watcher.shown) == 5)

        resp = await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
        r = resp.turns[0]
        assert (r.rewind_seq, r.checkpoint_id, r.turn.last_seq, r.turn.attempts) == (
            3,
            "1ef-0001",
            3,
            1,
        )

        # The rewind arrives on NATS with the boundary.
        await rewinds.wait_for(lambda: len(rewinds.messages) == 1)
        assert rewinds.messages[0][1] == {
            "turn_id": "t1",
            "thread_id": "th1",
            "checkpoint_id": "1ef-0001",
            "seq": 3,
            "attempt": 1,
        }
        # Retained events are exactly those up to the boundary.
        listed = await turns.ListEvents(pb.ListEventsRequest(turn_id="t1"))
        assert [(e.seq, e.type) for e in listed.events] == [
            (1, "step"),
            (2, "token"),
            (3, "tool_call_start"),
        ]

        # The new attempt continues from seq 4 and finishes.
        await turns.AppendEvents(
            pb.AppendEventsRequest(
                turn_id="t1", attempt=1, events=events(4, "tool_call_end", "final")
            )
        )
        await turns.FinishTurn(
            pb.FinishTurnRequest(turn_id="t1", attempt=1, outcome=pb.OUTCOME_DONE)
        )
        await watcher.finished()

        assert watcher.resets == 1
        # After the reset the watcher shows 1..6 once each: no duplicate, no gap.
        assert seqs(watcher.shown) == [1, 2, 3, 4, 5, 6]
        assert [t for _, t, _ in watcher.shown] == [
            "step",
            "token",
            "tool_call_start",
            "tool_call_end",
            "final",
            "turn.done",
        ]
        # The frames after the reset replay exactly the retained events, then live ones.
        after_reset = watcher.frames[
            [f.HasField("reset") for f in watcher.frames].index(True) + 1 :
        ]
        assert [f.event.seq for f in after_reset] == [1, 2, 3, 4, 5, 6]
        reset = next(f.reset for f in watcher.frames if f.HasField("reset"))
        assert (reset.seq, reset.attempt, reset.checkpoint_id) == (3, 1, "1ef-0001")
    finally:
        await nc.close()


async def test_redrive_without_checkpoint_rewinds_to_zero(turns: Stub) -> None:
    await start(turns)
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "token"))
    )
    resp = await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    assert (resp.turns[0].rewind_seq, resp.turns[0].checkpoint_id) == (0, "")
    listed = await turns.ListEvents(pb.ListEventsRequest(turn_id="t1"))
    assert list(listed.events) == []


async def test_checkpoint_of_an_earlier_turn_is_not_a_boundary(
    turns: Stub, checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub
) -> None:
    # Turn a writes a checkpoint on the thread and finishes; turn b on the same
    # thread crashes before its first checkpoint: it rewinds to 0, not to a's.
    await start(turns, turn_id="a")
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="a", attempt=0, events=events(1, "token", "token"))
    )
    await checkpoints.PutCheckpoint(put_checkpoint("a", 0, "1ef-a"))
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="a", attempt=0, outcome=pb.OUTCOME_DONE))
    await start(turns, turn_id="b")
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="b", attempt=0, events=events(1, "token"))
    )
    resp = await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    assert [(r.turn.turn_id, r.rewind_seq, r.checkpoint_id) for r in resp.turns] == [("b", 0, "")]


async def test_watch_after_seq_replays_only_later_events_and_ends_at_terminal(turns: Stub) -> None:
    await start(turns)
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "a", "b", "c"))
    )
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE))
    watcher = Watcher()
    watcher.start(turns, "t1", after_seq=2)
    await watcher.finished()
    assert seqs(watcher.shown) == [3, 4]
    assert watcher.shown[-1][1] == "turn.done"


async def test_watch_after_the_terminal_event_of_an_ended_turn_ends_at_once(turns: Stub) -> None:
    # Found by tests/faults: a watcher that joined a finished turn after its last
    # seq was never answered and never closed (nothing more would ever come).
    await start(turns)
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "a", "b"))
    )
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE))
    for after_seq in (3, 4):
        watcher = Watcher()
        watcher.start(turns, "t1", after_seq=after_seq)
        await watcher.finished()
        assert watcher.frames == []


async def test_fenced_checkpoint_from_a_stale_attempt_leaves_the_thread_unchanged(
    turns: Stub, checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub
) -> None:
    import grpc

    from tests.support.service import expect_code

    await start(turns)
    await checkpoints.PutCheckpoint(put_checkpoint("t1", 0, "1ef-0001"))
    await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    await expect_code(
        checkpoints.PutCheckpoint(put_checkpoint("t1", 0, "1ef-0002")), grpc.StatusCode.ABORTED
    )
    latest = await checkpoints.GetCheckpoint(cpb.GetCheckpointRequest(thread_id="th1"))
    assert latest.checkpoint.ref.checkpoint_id == "1ef-0001"
    listed = [
        r async for r in checkpoints.ListCheckpoints(cpb.ListCheckpointsRequest(thread_id="th1"))
    ]
    assert [r.checkpoint.ref.checkpoint_id for r in listed] == ["1ef-0001"]


class _Peer:
    """The one part of a ServicerContext WatchTurn reads (whose quota it counts)."""

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"


async def test_a_watch_closed_at_a_yield_lets_go_of_its_turn_at_once(
    service: TurnkeeperServer, turns: Stub
) -> None:
    # A watcher that leaves while a frame is on its way is not cancelled by grpc: grpc
    # stops iterating the handler and closes it at its yield. The engine's stream under
    # it must end then, not when the garbage collector gets to it.
    await start(turns)
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "a", "b"))
    )
    handler = service.turn_servicer.WatchTurn(
        pb.WatchTurnRequest(turn_id="t1"),
        _Peer(),  # type: ignore[arg-type]
    )
    first = await anext(handler)
    assert first.event.seq == 1
    assert (watchers(service), service.notifier.watchers()) == (1, 1)
    await handler.aclose()  # type: ignore[attr-defined]
    # No await in between: nothing else on the loop ran.
    assert (watchers(service), service.notifier.watchers()) == (0, 0)


def watchers(service: TurnkeeperServer) -> float | None:
    return service.metrics.registry.get_sample_value("turnkeeper_watchers")


async def test_a_watch_is_served_from_the_commits_news(
    turns: Stub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # WatchTurn through gRPC reads the journal at its start and then takes each
    # append, checkpoint and the finish from what the commit told it (decision 540).
    reads: list[int] = []
    read = watch._Tail._read

    async def counted(self: watch._Tail, cursor: int) -> Any:
        reads.append(cursor)
        return await read(self, cursor)

    monkeypatch.setattr(watch._Tail, "_read", counted)
    await start(turns)
    watcher = Watcher()
    watcher.start(turns, "t1")
    await turns.AppendEvents(pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "a")))
    await watcher.wait_for(lambda: len(watcher.shown) == 1)
    assert reads == [0]
    for seq in range(2, 8, 2):
        await turns.AppendEvents(
            pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(seq, "b", "c"))
        )
        await checkpoints.PutCheckpoint(put_checkpoint("t1", 0, f"1ef-{seq:04}"))
    await turns.FinishTurn(
        pb.FinishTurnRequest(
            turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE, events=events(8, "final")
        )
    )
    await watcher.finished()
    assert seqs(watcher.shown) == list(range(1, 10))
    assert [t for _, t, _ in watcher.shown[-2:]] == ["final", "turn.done"]
    assert reads == [0]


async def test_a_watch_joining_past_a_rewound_end_resets_before_the_rerun(
    turns: Stub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Found by the PostgreSQL fault campaign (decision 630): a late joiner took its
    # after_seq from a TurnStatus, a re-drive rewound the turn below it, and the
    # stream's first read found nothing after it; the re-run's appends, taken from the
    # commits' news, then went out at seqs the watcher already held, with no reset.
    first_read = watch_first_read(monkeypatch)
    await start(turns)
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "step", "token"))
    )
    await checkpoints.PutCheckpoint(put_checkpoint("t1", 0, "1ef-0001"))
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(3, "token", "token"))
    )
    joined_at = (await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))).last_seq
    assert joined_at == 4
    resp = await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    assert resp.turns[0].rewind_seq == 2
    watcher = Watcher()
    watcher.start(turns, "t1", after_seq=joined_at)
    # Its first read is done and found nothing after seq 4: the re-run's seqs 3 and 4
    # come to it as news.
    await first_read.wait()
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=1, events=events(3, "token", "token", "final"))
    )
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="t1", attempt=1, outcome=pb.OUTCOME_DONE))
    await watcher.finished()
    # The rewind reached it as a reset before any event, then the turn's events once.
    assert watcher.frames[0].HasField("reset")
    assert (watcher.frames[0].reset.seq, watcher.frames[0].reset.attempt) == (2, 1)
    assert watcher.resets == 1
    assert seqs(watcher.shown) == [1, 2, 3, 4, 5, 6]
    assert [f.event.attempt for f in watcher.frames[1:]] == [0, 0, 1, 1, 1, 1]
