"""The JSON objects of LangGraph's API (assistants, threads, runs) made from the
journal's records, with the field names and values its SDKs read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.records import TurnRecord

# A turn's state as a run's status, and as the status of the thread it is newest on.
# A run stopped at an interrupt is over, LangGraph's server says (`success`; its
# thread is `interrupted`); a cancelled one is `interrupted`.
RUN_STATUS: Final = {
    "QUEUED": "pending",
    "RUNNING": "running",
    "PARKED": "success",
    "DONE": "success",
    "FAILED": "error",
    "CANCELLED": "interrupted",
}
THREAD_STATUS: Final = {
    "QUEUED": "busy",
    "RUNNING": "busy",
    "PARKED": "interrupted",
    "DONE": "idle",
    "FAILED": "error",
    "CANCELLED": "idle",
}
# The creation time of an assistant: it has none of its own (it is its agent).
EPOCH: Final = "1970-01-01T00:00:00+00:00"


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def assistant(agent: str) -> dict[str, Any]:
    """An agent as an assistant: its name is the assistant id and the graph id."""
    return {
        "assistant_id": agent,
        "graph_id": agent,
        "name": agent,
        "description": None,
        "config": {},
        "context": {},
        "metadata": {"created_by": "system"},
        "version": 1,
        "created_at": EPOCH,
        "updated_at": EPOCH,
    }


def thread(
    record: ThreadRecord, newest: TurnRecord | None, values: Any, interrupts: dict[str, Any]
) -> dict[str, Any]:
    updated = max(record.updated_at, newest.updated_at if newest else 0.0)
    return {
        "thread_id": record.thread_id,
        "created_at": iso(record.created_at),
        "updated_at": iso(updated),
        "metadata": record.metadata,
        "status": THREAD_STATUS.get(newest.state, "idle") if newest else "idle",
        "values": values,
        "interrupts": interrupts,
        "config": {},
    }


def run(
    turn: TurnRecord, record: RunRecord | None = None, *, status: str | None = None
) -> dict[str, Any]:
    """A turn as a run, with its record (journal/runs.py) when it has one; `status`
    instead of the turn's (a create answers `pending`, as LangGraph's server)."""
    return {
        "run_id": turn.turn_id,
        "thread_id": turn.thread_id,
        "assistant_id": turn.agent,
        "created_at": iso(turn.created_at),
        "updated_at": iso(turn.updated_at),
        "status": status or RUN_STATUS.get(turn.state, "pending"),
        "metadata": record.metadata if record else {},
        "multitask_strategy": (record.multitask_strategy or None) if record else None,
        "kwargs": record.kwargs if record else {},
    }
