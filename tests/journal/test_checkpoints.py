"""journal/checkpoints.py: a checkpoint or a task's writes made for a turn carry its
fence and are refused like any other write of a stale attempt; a turn's checkpoint
records the turn's last_seq as its boundary; a thread's checkpoints stay while a turn
of it is live."""

from __future__ import annotations

import pytest
from turnkeeper_server.errors import StaleAttempt, WrongState
from turnkeeper_server.journal import checkpoints, lifecycle, transitions
from turnkeeper_server.records import Fence
from turnkeeper_server.store.records import CheckpointQuery

from tests.journal.conftest import POLICY, Journal

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(60)]


def stored(journal: Journal, thread_id: str) -> list[str]:
    rows = journal.db.checkpoints.list_(
        journal.db.read_conn(), CheckpointQuery(thread_id=thread_id, checkpoint_ns="")
    )
    return sorted(row.checkpoint_id for row in rows)


async def test_a_turns_checkpoint_records_its_last_seq_as_the_boundary(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await journal.events("t1", 0, "step", "token", "token")
    moved = await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    assert moved == "t1"  # a watcher of t1's settled events wakes
    assert journal.boundary("t1") == ("cp-1", 3)
    await journal.events("t1", 0, "step")
    await journal.checkpoint("th1", "cp-2", Fence("t1", 0))
    assert journal.boundary("t1") == ("cp-2", 4)


async def test_an_unfenced_checkpoint_beside_a_live_turn_is_refused(journal: Journal) -> None:
    # Decision 276: the live (or parked) turn's checkpoints are its own.
    await journal.start("t1", "th1")
    await journal.events("t1", 0, "step")
    with pytest.raises(WrongState, match="cannot be written beside it"):
        await journal.checkpoint("th1", "cp-1", None)
    with pytest.raises(WrongState, match="cannot be written beside it"):
        await journal.task_writes("th1", "cp-1", "task-a", None, None)
    assert stored(journal, "th1") == []
    assert journal.boundary("t1") == ("", 0)


async def test_an_unfenced_checkpoint_on_a_thread_without_a_live_turn_is_stored(
    journal: Journal,
) -> None:
    # A graph's own write outside any turn (LangGraph's update_state before a run).
    await journal.start("t1", "th1")
    assert await journal.checkpoint("th2", "cp-1", None) is None
    assert stored(journal, "th2") == ["cp-1"]


async def test_a_stale_attempts_checkpoint_is_refused_and_not_stored(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await journal.events("t1", 0, "step")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    redriven = await journal.redrive("t1")
    assert redriven.attempts == 1
    with pytest.raises(StaleAttempt, match="attempt 0 was re-driven away"):
        await journal.checkpoint("th1", "cp-2", Fence("t1", 0))
    assert stored(journal, "th1") == ["cp-1"]
    assert journal.boundary("t1") == ("cp-1", 1)
    # The current attempt's write goes through.
    await journal.checkpoint("th1", "cp-2", Fence("t1", 1))
    assert stored(journal, "th1") == ["cp-1", "cp-2"]


async def test_a_stale_attempts_task_writes_are_refused(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    await journal.redrive("t1")
    with pytest.raises(StaleAttempt):
        await journal.task_writes("th1", "cp-1", "task-a", Fence("t1", 0), None)
    row = journal.db.checkpoints.get(journal.db.read_conn(), "th1", "", "cp-1")
    assert row is not None
    assert not row.writes


async def test_a_write_fenced_for_a_turn_of_another_thread_is_refused(journal: Journal) -> None:
    await journal.start("t1", "th1")
    with pytest.raises(WrongState, match="runs on thread 'th1', not 'th2'"):
        await journal.checkpoint("th2", "cp-1", Fence("t1", 0))
    assert stored(journal, "th2") == []


async def test_a_cancelled_turns_attempt_is_stale_and_a_parked_one_in_the_wrong_state(
    journal: Journal,
) -> None:
    await journal.start("t1", "th1")
    await journal.write(
        lambda tx: lifecycle.cancel_turn(tx, turn_id="t1", rollback=False, detail="", policy=POLICY)
    )
    with pytest.raises(StaleAttempt, match="cancelled"):
        await journal.checkpoint("th1", "cp-1", Fence("t1", 0))

    await journal.start("t2", "th2")
    await journal.write(
        lambda tx: transitions.park_turn(
            tx, turn_id="t2", attempt=0, interrupt_json="{}", events=[], policy=POLICY
        )
    )
    with pytest.raises(WrongState, match="PARKED, not RUNNING"):
        await journal.checkpoint("th2", "cp-1", Fence("t2", 0))
    assert stored(journal, "th1") == stored(journal, "th2") == []


async def test_check_fence_returns_the_locked_turn_or_none(journal: Journal) -> None:
    await journal.start("t1", "th1")
    turn = await journal.write(lambda tx: checkpoints.check_fence(tx, Fence("t1", 0), "th1"))
    assert turn is not None
    assert (turn.turn_id, turn.attempts) == ("t1", 0)
    # Unfenced: None on a thread without a live turn; refused beside one (decision 283).
    assert await journal.write(lambda tx: checkpoints.check_fence(tx, None, "th2")) is None
    with pytest.raises(WrongState, match="cannot be written beside it"):
        await journal.write(lambda tx: checkpoints.check_fence(tx, None, "th1"))


async def test_a_threads_checkpoints_stay_while_a_turn_of_it_is_live(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    with pytest.raises(WrongState, match="has a live turn 't1'"):
        await journal.write(lambda tx: checkpoints.delete_thread(tx, "th1"))
    assert stored(journal, "th1") == ["cp-1"]
    await journal.write(
        lambda tx: transitions.finish_turn(
            tx, turn_id="t1", attempt=0, failed=False, error="", events=[], policy=POLICY
        )
    )
    await journal.write(lambda tx: checkpoints.delete_thread(tx, "th1"))
    assert stored(journal, "th1") == []
