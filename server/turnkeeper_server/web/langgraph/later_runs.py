"""Runs started later (`after_seconds`): a one-shot schedule in the journal
(journal/crons.py, kind 'once', decision 332) that a replica fires when due, across
restarts, through the same path as every run (run_start.launch). Until then the run
is `pending`: read, listed, cancelled and joined by its run id.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from turnkeeper_server.journal.assistants import AssistantRecord
from turnkeeper_server.journal.crons import ONCE, CronRecord
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web.langgraph import assistants, end_users, run_start, shapes
from turnkeeper_server.web.langgraph.api import (
    THREADS_WRITE,
    Deps,
    body_of,
    require,
    run_or_404,
    sees_owned,
)
from turnkeeper_server.web.langgraph.errors import ApiError, not_found

# The longest a run may be started later (after_seconds), a year.
MAX_AFTER_SECONDS: Final = 366 * 24 * 3600
# How often a join of a run started later looks whether it started.
LATER_POLL_SECONDS = 0.25


def after_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ApiError(422, "after_seconds must be a number of seconds, not negative")
    if value > MAX_AFTER_SECONDS:
        raise ApiError(422, f"after_seconds must be at most {MAX_AFTER_SECONDS} (a year)")
    return float(value)


@dataclass(frozen=True)
class Later:
    """A run to start later, checked: what `put_later` keeps."""

    payload: dict[str, Any]
    delay: float
    assistant: AssistantRecord
    thread_id: str | None
    stamped: dict[str, Any]
    if_not_exists: Any


async def start_later(request: web.Request, caller: Caller | None, deps: Deps) -> CronRecord:
    """A run that starts `after_seconds` from now: its thread made (or checked) and
    its run id given now, kept in the journal as a one-shot schedule (journal/
    crons.py, kind 'once') that a replica fires when due, across restarts; until
    then the run is `pending`."""
    body = await body_of(request)
    later = await check_later(request, caller, deps, body, run_start.thread_path(request))
    return await put_later(request, caller, deps, later)


async def check_later(
    request: web.Request,
    caller: Caller | None,
    deps: Deps,
    body: dict[str, Any],
    thread_id: str | None,
) -> Later:
    """What `body` asks, refused now if it cannot start when due: its options, its
    assistant, the auth handler's `threads:create_run` (its stamp kept)."""
    run_start.refuse_not_yet(body)
    delay = after_seconds(body.get("after_seconds"))
    payload = {k: v for k, v in body.items() if k != "after_seconds"}
    run_start.check_run_body(payload)
    require(caller, THREADS_WRITE)
    assistant = await assistants.resolve(deps, caller, body.get("assistant_id"))
    stamped = await end_users.create_run(request, deps, thread_id, body)
    return Later(payload, delay, assistant, thread_id, stamped, body.get("if_not_exists"))


async def put_later(
    request: web.Request, caller: Caller | None, deps: Deps, later: Later
) -> CronRecord:
    """The checked run kept to start when due, its thread made (or checked) now."""
    assistant, stamped = later.assistant, later.stamped
    tagged = {"graph_id": assistant.graph_id, "assistant_id": assistant.assistant_id}
    thread, _ = await run_start.thread_for_run(
        deps, caller, later.thread_id, {**tagged, **stamped}, later.if_not_exists
    )
    now = time.time()
    user = request.get(end_users.END_USER)
    record = CronRecord(
        cron_id=str(uuid.uuid4()),
        kind=ONCE,
        assistant_id=assistant.assistant_id,
        thread_id=thread.thread_id,
        run_id=str(uuid.uuid4()),
        schedule="",
        timezone=None,
        payload=later.payload,
        metadata=stamped,
        webhook=later.payload.get("webhook"),
        on_run_completed=None,
        end_time=None,
        enabled=True,
        owner=auth.identity(caller),
        acts_as=run_start.acts_as(caller),
        user_id=user.identity if user is not None else None,
        next_run_at=now + later.delay,
        created_at=now,
        updated_at=now,
    )
    await deps.engine.crons.put(record)
    return record


def later_shape(record: CronRecord) -> dict[str, Any]:
    """A run not started yet (after_seconds) as a run: `pending`, or `error` when
    its start was refused when it came due (its row keeps why)."""
    payload = record.payload
    return {
        "run_id": record.run_id,
        "thread_id": record.thread_id,
        "assistant_id": record.assistant_id,
        "created_at": shapes.iso(record.created_at),
        "updated_at": shapes.iso(record.updated_at),
        "status": "error" if record.last_error and record.next_run_at is None else "pending",
        "metadata": {
            **(payload.get("metadata") or {}),
            **record.metadata,
            "assistant_id": record.assistant_id,
        },
        "multitask_strategy": payload.get("multitask_strategy"),
        "kwargs": {name: payload.get(name) for name in run_start.KWARGS},
    }


async def later_or_404(
    deps: Deps, caller: Caller | None, thread_id: str | None, run_id: str
) -> CronRecord:
    """The run not started yet that `run_id` names, if the caller sees it; else
    the run's 404."""
    record = await deps.engine.crons.by_run(run_id)
    if (
        record is None
        or (thread_id is not None and record.thread_id != thread_id)
        or (caller is not None and not sees_owned(caller, record.owner))
    ):
        raise not_found(f"run {run_id}")
    return record


async def started(
    deps: Deps, caller: Caller | None, thread_id: str | None, run_id: str
) -> TurnRecord:
    """The run, once it started: a run started later is waited for (looked at every
    LATER_POLL_SECONDS) until a replica starts it; 409 when its start was refused
    then, 404 when it was cancelled meanwhile."""
    try:
        return run_or_404(deps, caller, thread_id, run_id)
    except ApiError as exc:
        if exc.status != 404:
            raise
    await later_or_404(deps, caller, thread_id, run_id)
    while True:
        if deps.engine.turns.get(run_id) is not None:
            return run_or_404(deps, caller, thread_id, run_id)
        later = await deps.engine.crons.by_run(run_id)
        if later is None and deps.engine.turns.get(run_id) is None:
            raise not_found(f"run {run_id}")
        if later is not None and later.next_run_at is None:
            raise ApiError(409, f"run {run_id} was refused when due: {later.last_error}")
        await asyncio.sleep(LATER_POLL_SECONDS)
