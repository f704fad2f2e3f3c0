"""The JSON objects of LangGraph's API (threads, runs; assistants.py shapes its
own) made from the journal's records, with the field names and values its SDKs
read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from turnkeeper._run_request import default_assistant_id

from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.records import RUNNING, TurnRecord

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


def run_status(turn: TurnRecord) -> str:
    """A turn's state as a run's status: a RUNNING turn no replica has claimed yet
    (just started, waiting for a replica of its graph, or for a free slot of one:
    decision 381) is `pending`, as a run no worker has picked up is on LangGraph's
    server (decision 371). So is one claimed for a replica in its start's commit
    that has not taken it yet (decision 590)."""
    if turn.state == RUNNING and not turn.taken:
        return "pending"
    return RUN_STATUS.get(turn.state, "pending")


THREAD_STATUS: Final = {
    "QUEUED": "busy",
    "RUNNING": "busy",
    "PARKED": "interrupted",
    "DONE": "idle",
    "FAILED": "error",
    "CANCELLED": "idle",
}


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def thread_status(newest: TurnRecord | None) -> str:
    """A thread's status: its newest run's (idle with none)."""
    return THREAD_STATUS.get(newest.state, "idle") if newest else "idle"


def thread_updated_at(record: ThreadRecord, newest: TurnRecord | None) -> float:
    """The later of the thread's own change (metadata, state) and its newest run's."""
    return max(record.updated_at, newest.updated_at if newest else 0.0)


def state_updated_at(record: ThreadRecord, newest: TurnRecord | None) -> float:
    """When the thread's state last changed: its newest run's last change (the
    thread's own time before it has one)."""
    return newest.updated_at if newest else record.updated_at


def thread(
    record: ThreadRecord, newest: TurnRecord | None, values: Any, interrupts: dict[str, Any]
) -> dict[str, Any]:
    return {
        "thread_id": record.thread_id,
        "created_at": iso(record.created_at),
        "updated_at": iso(thread_updated_at(record, newest)),
        "state_updated_at": iso(state_updated_at(record, newest)),
        "metadata": record.metadata,
        "status": thread_status(newest),
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
        # The assistant the run was made with (its record's metadata, as LangGraph's
        # server keeps it), else its graph's default.
        "assistant_id": (record.metadata.get("assistant_id") if record else None)
        or default_assistant_id(turn.agent),
        "created_at": iso(turn.created_at),
        "updated_at": iso(turn.updated_at),
        "status": status or run_status(turn),
        "metadata": record.metadata if record else {},
        "multitask_strategy": (record.multitask_strategy or None) if record else None,
        "kwargs": record.kwargs if record else {},
    }
