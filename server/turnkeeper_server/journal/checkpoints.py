"""The journal's rules for LangGraph checkpoints, above each backend's rows.

A checkpoint or a task's writes made for a turn carry the turn's fence (turn_id,
attempt): they are refused like any other write of a stale attempt
(docs/architecture.md §4), and a checkpoint records the turn's last_seq as its
boundary, where a re-drive rewinds to (§3). A thread's checkpoints are not deleted
while a turn of the thread is live: they are what its re-drive resumes from.
The rows themselves are the backend's (`Tx.checkpoints`: store/sqlite_checkpoints.py,
store/postgres_checkpoints.py).

Effects (journal/effects.py) ride on the same writes: a task's writes that say which
effects their execution made settle the task's others (superseded), and a turn's
checkpoint first announces the superseded ones in its events, so its boundary
keeps the announcement. On SQLite the effects are in turns.db and the checkpoint
rows in sessions.db: one group commits both, but WAL makes each file atomic on its
own (docs/effects.md says what a power loss between the two can leave).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnkeeper_server.errors import WrongState
from turnkeeper_server.journal import effects, transitions
from turnkeeper_server.records import LIVE_SQL, Fence, Policy, TurnRecord
from turnkeeper_server.store.contract import Tx
from turnkeeper_server.store.records import Boundary, CheckpointPut, WritesPut


@dataclass(frozen=True, slots=True)
class CheckpointWrite:
    """A PutCheckpoint (`row` a CheckpointPut) or a PutWrites (`row` a WritesPut),
    with the fence of the turn attempt it is made for, if any."""

    row: CheckpointPut | WritesPut
    fence: Fence | None
    # A task's writes from an effect-aware client: the keys of the effects the
    # execution that made them made (PutWritesRequest.settle_effects); None otherwise.
    effects_made: frozenset[str] | None = None


def write(tx: Tx, write: CheckpointWrite, policy: Policy) -> Boundary | None:
    """Store one checkpoint write, fenced; a turn's checkpoint with its boundary.
    Returns that boundary: the turn whose boundary moved (a watcher of its settled
    events wakes) and its last_seq, which the writer numbers its next event after
    (the announcements below took seqs it did not write)."""
    turn = check_fence(tx, write.fence, write.row.thread_id)
    if isinstance(write.row, CheckpointPut):
        if turn is not None:
            turn = effects.announce(tx, turn, policy)
            tx.remember_turn(turn)  # its last_seq after the announcements
        boundary = None if turn is None else Boundary(turn.turn_id, turn.attempts, turn.last_seq)
        tx.checkpoints.put(tx, write.row, boundary)
        return boundary
    tx.checkpoints.put_writes(tx, write.row)
    if turn is not None:
        tx.remember_turn(turn)  # settling effects changes no column of the row
    if (
        turn is not None
        and write.effects_made is not None
        and not any(w[1] in effects.NOT_A_RESULT for w in write.row.writes)
    ):
        effects.settle(tx, turn, write.row.task_id, write.effects_made)
    return None


def check_fence(tx: Tx, fence: Fence | None, thread_id: str) -> TurnRecord | None:
    """The fenced turn, locked, when the write's attempt is its current one and it
    runs on `thread_id`; None for an unfenced write, which a thread with a live
    (running or parked) turn refuses: that turn's checkpoints are its own, and a
    write beside it (an update_state on a parked human gate) would change what its
    resume goes on from (decision 283)."""
    if fence is None:
        require_no_live_turn(tx, thread_id, "written beside it")
        return None
    return transitions.fenced_turn(tx, fence.turn_id, fence.attempt, thread_id)


def require_no_live_turn(tx: Tx, thread_id: str, what: str = "deleted until the turn ends") -> None:
    live = tx.execute(
        f"SELECT turn_id FROM main.turns WHERE thread_id = ? AND state IN {LIVE_SQL}",
        (thread_id,),
    ).fetchone()
    if live is not None:
        raise WrongState(
            f"thread {thread_id!r} has a live turn {live[0]!r}; its checkpoints are what a "
            f"resume or re-drive goes on from, so they cannot be {what}"
        )


def delete_thread(tx: Tx, thread_id: str) -> None:
    """Every checkpoint of the thread, once no turn of it is live."""
    require_no_live_turn(tx, thread_id)
    tx.checkpoints.delete_thread(tx, thread_id)
