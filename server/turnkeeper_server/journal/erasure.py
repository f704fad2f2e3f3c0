"""Erasure: every row of a thread goes, in both files, in one transaction.

A thread's rows are its own (journal/threads.py: its metadata), its turns (with their journaled inputs, interrupt and resume
values, and their LangGraph run records, journal/runs.py), its crons and runs due
later (journal/crons.py), their retained events and effects (journal/effects.py), the outbox rows
not yet sent to NATS (which carry the same text), and its checkpoints, their writes (and blobs, on PostgreSQL)
and the turn boundaries, and the store items under the namespace ("threads",
<thread id>) (journal/store_items.py, decision 352). A thread with a live turn is refused unless the call cancels
that turn first (the cancel is part of the same transaction, so there is no
window in which a re-drive resumes from checkpoints about to vanish).

Outbox rows are found by subject: a turn's events go to `<prefix>.turn.events.<id>`;
rewinds share one subject, so those are matched on the thread id in their JSON.
The SQL is plain: PostgreSQL accepts it too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from turnkeeper_server.errors import WrongState
from turnkeeper_server.journal import (
    checkpoints,
    crons,
    effects,
    lifecycle,
    runs,
    store_items,
    threads,
    transitions,
    webhooks,
)
from turnkeeper_server.journal.lifecycle import Cancelled
from turnkeeper_server.records import ENDED, LIVE, TURN_COLUMNS, Policy, TurnRecord
from turnkeeper_server.store.contract import Tx

# Rows deleted per statement that lists turn ids (SQLite's default variable limit
# is far higher; PostgreSQL has none to speak of).
_CHUNK = 500


@dataclass(frozen=True)
class Erased:
    thread_id: str
    turns_deleted: int
    # The live turn cancelled first (cancel=True), for the engine to stop its executor.
    cancelled: Cancelled | None


def erase_thread(tx: Tx, *, thread_id: str, cancel: bool, policy: Policy) -> Erased:
    rows = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE thread_id = ?{tx.for_update}", (thread_id,)
    ).fetchall()
    turns = [TurnRecord(*r) for r in rows]
    live = [t for t in turns if t.state in LIVE]
    cancelled: Cancelled | None = None
    if live:
        if not cancel:
            raise WrongState(
                f"thread {thread_id!r} has a live turn {live[0].turn_id!r} ({live[0].state}); "
                "its checkpoints are what a re-drive resumes from. Cancel it first, or "
                "pass cancel to cancel it in the same call"
            )
        cancelled, _ = lifecycle.cancel_turn(
            tx, turn_id=live[0].turn_id, rollback=False, detail="thread deleted", policy=policy
        )
    ids = [t.turn_id for t in turns]
    delete_turns(tx, ids, policy)
    _erase_rewinds(tx, thread_id, policy)
    # The backend's checkpoint rows (blobs too, on PostgreSQL); no live turn is left.
    checkpoints.delete_thread(tx, thread_id)
    # Its crons and its runs due later go with it (they would start runs on it).
    crons.delete_for_threads(tx, [thread_id])
    threads.delete(tx, thread_id)
    # The store's memory of the thread, by the namespace convention (decision 352);
    # a thread id may hold a period, which no label may: nothing is stored under it.
    if "." not in thread_id and thread_id:
        store_items.erase_under(tx, (store_items.THREAD_LABEL, thread_id))
    return Erased(thread_id, len(ids), cancelled)


def delete_turn(tx: Tx, *, turn_id: str, policy: Policy) -> TurnRecord:
    """One finished turn's rows (a LangGraph run deleted): its events, outbox rows and
    boundaries; the thread's checkpoints stay, they are the thread's history. A live
    or queued turn is refused: cancel it first."""
    turn = transitions.lock_turn(tx, turn_id)
    if turn.state not in ENDED:
        raise WrongState(
            f"run {turn_id} is {turn.state.lower()}; cancel it first (a run that may "
            "still write is not deleted)"
        )
    delete_turns(tx, [turn_id], policy)
    return turn


def _erase_rewinds(tx: Tx, thread_id: str, policy: Policy) -> None:
    rows = tx.execute(
        "SELECT id, payload FROM main.outbox WHERE subject = ?", (policy.rewind_subject,)
    ).fetchall()
    doomed = []
    for row_id, payload in rows:
        try:
            if json.loads(bytes(payload)).get("thread_id") == thread_id:
                doomed.append(row_id)
        except (ValueError, AttributeError):
            continue
    for row_id in doomed:
        tx.execute("DELETE FROM main.outbox WHERE id = ?", (row_id,))


def delete_turns(tx: Tx, ids: list[str], policy: Policy) -> None:
    """Delete these turns' rows and all that is theirs alone: events, effects, the
    outbox rows of their events subject, and their checkpoint boundaries."""
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        marks = ", ".join("?" for _ in chunk)
        tx.execute(f"DELETE FROM main.events WHERE turn_id IN ({marks})", chunk)
        effects.delete_for_turns(tx, chunk)
        runs.delete_for_turns(tx, chunk)
        webhooks.delete_for_turns(tx, chunk)
        tx.execute(
            f"DELETE FROM main.outbox WHERE subject IN ({marks})",
            [policy.events_subject(turn_id) for turn_id in chunk],
        )
        tx.execute(f"DELETE FROM sessions.turnkeeper_boundaries WHERE turn_id IN ({marks})", chunk)
        tx.execute(f"DELETE FROM main.turns WHERE turn_id IN ({marks})", chunk)
