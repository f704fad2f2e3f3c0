"""A LangGraph API run's own record, beside its turn: the ``metadata`` and ``kwargs``
it was created with (its input or command, stream modes, interrupts ...) and its
multitask strategy, as LangGraph's server stores and answers them. The turn is the
execution; this row is what only the API gives it. It is written once, when the
run is started (in its turn's commit, decision 700, unless the agent starts the
turn), and deleted with its turn (journal/erasure.py). A turn started
through another door has none. Beside it, what a run reads of the thread's turns
before it: the state they journaled last (`values_before`). The SQL is plain:
PostgreSQL accepts it too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from turnkeeper_server.journal import webhooks
from turnkeeper_server.records import QUEUED, RUNNING, sql_list
from turnkeeper_server.store.contract import Conn, Tx

_COLUMNS = "turn_id, metadata, kwargs, multitask_strategy"
# How many of a thread's earlier turns are looked through for its last state.
VALUES_LOOKBACK = 20


@dataclass(frozen=True)
class RunRecord:
    turn_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    kwargs: dict[str, Any] = field(default_factory=dict)
    # '' for none recorded.
    multitask_strategy: str = ""


def _object(text: str) -> dict[str, Any]:
    value = json.loads(text) if text else {}
    return value if isinstance(value, dict) else {}


def put(tx: Tx, record: RunRecord) -> None:
    """The run's record (the same run started again keeps the first one), and its
    webhook's delivery when its kwargs name one (journal/webhooks.py)."""
    # Nobody reads its answer: on PostgreSQL it rides with the operation's other
    # unread writes, or with the group's notification (decision 610).
    tx.send(
        f"INSERT INTO main.langgraph_runs ({_COLUMNS}) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (turn_id) DO NOTHING",
        (
            record.turn_id,
            json.dumps(record.metadata),
            json.dumps(record.kwargs),
            record.multitask_strategy,
        ),
    )
    url = record.kwargs.get("webhook")
    if isinstance(url, str) and url:
        webhooks.subscribe(tx, record.turn_id, url)


def get_many(conn: Conn, turn_ids: Sequence[str]) -> dict[str, RunRecord]:
    """The records of these turns that have one, by turn id."""
    found: dict[str, RunRecord] = {}
    ids = list(dict.fromkeys(turn_ids))
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        marks = ", ".join("?" for _ in chunk)
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM main.langgraph_runs WHERE turn_id IN ({marks})", chunk
        ).fetchall()
        for row in rows:
            found[row[0]] = RunRecord(row[0], _object(row[1]), _object(row[2]), row[3])
    return found


def is_run(conn: Conn, turn_id: str) -> bool:
    """The turn is a LangGraph API run (it has a record)."""
    found = conn.execute(
        "SELECT 1 FROM main.langgraph_runs WHERE turn_id = ?", (turn_id,)
    ).fetchone()
    return found is not None


def unfinished(conn: Conn) -> list[tuple[str, dict[str, Any]]]:
    """Every run still to finish (running, or queued to run) and its metadata, oldest
    first: a run stopped at an interrupt is over on LangGraph's server, so a parked
    turn is not among them, nor is a turn the LangGraph API did not start."""
    rows = conn.execute(
        "SELECT r.turn_id, r.metadata FROM main.langgraph_runs r "
        "JOIN main.turns t ON t.turn_id = r.turn_id "
        f"WHERE t.state IN {sql_list((RUNNING, QUEUED))} ORDER BY t.created_at"
    ).fetchall()
    return [(row[0], _object(row[1])) for row in rows]


def unfinished_of_assistant(conn: Conn, assistant_id: str) -> list[str]:
    """The runs of this assistant still to finish, oldest first (`unfinished`): what
    LangGraph's server cancels when the assistant is deleted."""
    return [
        turn_id
        for turn_id, metadata in unfinished(conn)
        if metadata.get("assistant_id") == assistant_id
    ]


def delete_for_turns(tx: Tx, turn_ids: Sequence[str]) -> None:
    """The records of these turns (their turns are being deleted)."""
    if not turn_ids:
        return
    marks = ", ".join("?" for _ in turn_ids)
    tx.execute(f"DELETE FROM main.langgraph_runs WHERE turn_id IN ({marks})", list(turn_ids))


def values_before(conn: Conn, thread_id: str, turn_id: str, created_at: float) -> str | None:
    """The data of the newest `values` event of the thread's turns before this one
    (the state a run starts from, as LangGraph's server streams it first): a run
    that goes on from a checkpoint without writing one journals no state of its
    own before its first step. None: none of the thread's VALUES_LOOKBACK turns
    before it journaled one (or retention pruned their events)."""
    earlier = conn.execute(
        "SELECT turn_id FROM main.turns WHERE thread_id = ? AND turn_id <> ? AND created_at <= ? "
        "ORDER BY created_at DESC LIMIT ?",
        (thread_id, turn_id, created_at, VALUES_LOOKBACK),
    ).fetchall()
    for (earlier_id,) in earlier:
        row = conn.execute(
            "SELECT data_json FROM main.events WHERE turn_id = ? AND type = 'values' "
            "ORDER BY seq DESC LIMIT 1",
            (earlier_id,),
        ).fetchone()
        if row is not None:
            return str(row[0])
    return None
