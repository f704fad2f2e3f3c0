"""LangGraph's crons over its API (``client.crons.*``), and the scheduler that fires
them and the runs started later (``after_seconds``, later_runs.py).

A cron is kept in the journal (journal/crons.py) with the run body it starts: on
each tick of its schedule (a cron expression, five fields, or six with seconds
last, as croniter reads them; in UTC unless it names a timezone) a replica claims
the tick and starts a run through `run_start.launch`, the code path of POST /runs and
/threads/{id}/runs, so the run is a turn, durable like any. A thread's cron runs
on its thread; a thread-less cron's each run on a new thread.

Every replica runs a `CronScheduler`; one claims each due tick (fenced, see
journal/crons.py) and the run's id is the tick's, so a tick fired twice is one
run. The catch-up rule (decision 331): a tick missed while no replica was up is
not run once per missed tick: the cron fires once when a replica comes back, then
goes on from the schedule's next tick.

Rights: a cron is its maker's, as a thread (decisions 309-311): seen, changed and
deleted by its owner, operators and admins; a cron on a thread the caller cannot
see is not found. A langgraph.json's auth is asked as LangGraph's server asks it
(resource ``crons``: create, read, update, delete, search); its runs start under
its maker's token, looked up again when each fires (a revoked token stops them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from aiohttp import web
from croniter import croniter

from turnkeeper_server.journal.crons import CRON, CronRecord, tick_run_id, tick_thread_id
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web.langgraph import assistants, end_users, run_start, shapes, webhooks
from turnkeeper_server.web.langgraph.api import (
    READ,
    THREADS_WRITE,
    Deps,
    body_of,
    field,
    json_response,
    limit_offset,
    require,
    sees_owned,
    thread_id_of,
    thread_or_404,
)
from turnkeeper_server.web.langgraph.custom_auth import matches
from turnkeeper_server.web.langgraph.errors import ApiError, not_found
from turnkeeper_server.web.relay import NotAnswered

log = logging.getLogger(__name__)

# A cron's own keys; the rest of its body is the run each tick starts.
CRON_KEYS: Final = ("schedule", "end_time", "enabled", "timezone", "on_run_completed")
# What search may sort by and select, as LangGraph's server.
SORT_BY: Final = (
    "cron_id",
    "assistant_id",
    "thread_id",
    "next_run_date",
    "end_time",
    "created_at",
    "updated_at",
)
FIELDS: Final = frozenset(
    {
        "cron_id",
        "assistant_id",
        "thread_id",
        "on_run_completed",
        "end_time",
        "schedule",
        "timezone",
        "created_at",
        "updated_at",
        "user_id",
        "payload",
        "next_run_date",
        "metadata",
        "enabled",
    }
)
# The run body keys an update may change (merged into the cron's payload).
PAYLOAD_KEYS: Final = (
    "input",
    "config",
    "context",
    "metadata",
    "webhook",
    "interrupt_before",
    "interrupt_after",
    "stream_mode",
    "stream_subgraphs",
    "stream_resumable",
    "durability",
    "multitask_strategy",
)


# -- schedules ----------------------------------------------------------------------


def _zone(timezone: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise ApiError(
            422, f"timezone: {timezone!r} is not an IANA timezone (like 'America/New_York')"
        ) from None


def check_schedule(schedule: Any) -> str:
    if not isinstance(schedule, str) or not croniter.is_valid(schedule):
        raise ApiError(
            422,
            f"schedule: {schedule!r} is not a cron schedule; use five fields (minute hour "
            "day-of-month month day-of-week, like '*/5 * * * *') or six with seconds last "
            "('* * * * * */2': every 2 seconds)",
        )
    return schedule


def next_tick(schedule: str, timezone: str | None, after: float) -> float:
    """The schedule's first tick strictly after `after` (epoch seconds)."""
    start = datetime.fromtimestamp(after, _zone(timezone))
    found: datetime = croniter(schedule, start).get_next(datetime)
    return found.timestamp()


def claim_lease(record: CronRecord) -> float:
    """How long a replica holds a tick's claim: half the schedule's period (so a
    replica that died holding it is taken over before the next tick), from 1 s to
    30 s; a run started later, 30 s."""
    if record.kind != CRON or record.next_run_at is None:
        return 30.0
    period = next_tick(record.schedule, record.timezone, record.next_run_at) - record.next_run_at
    return min(max(period / 2, 1.0), 30.0)


def _end_time(value: Any) -> float | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ApiError(422, "end_time must be an ISO 8601 date and time")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ApiError(422, f"end_time: {value!r} is not an ISO 8601 date and time") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def _next_after(record: CronRecord, after: float) -> float | None:
    """The tick after `after`, None past the cron's end."""
    tick = next_tick(record.schedule, record.timezone, after)
    return None if record.end_time is not None and tick > record.end_time else tick


# -- the API ------------------------------------------------------------------------


def shape(record: CronRecord) -> dict[str, Any]:
    """A cron with LangGraph's server's keys."""
    return {
        "cron_id": record.cron_id,
        "assistant_id": record.assistant_id,
        "thread_id": record.thread_id,
        "on_run_completed": record.on_run_completed,
        "end_time": None if record.end_time is None else shapes.iso(record.end_time),
        "schedule": record.schedule,
        "timezone": record.timezone,
        "created_at": shapes.iso(record.created_at),
        "updated_at": shapes.iso(record.updated_at),
        "user_id": record.user_id,
        "payload": {**record.payload, "schedule": record.schedule},
        "next_run_date": None if record.next_run_at is None else shapes.iso(record.next_run_at),
        "metadata": record.metadata,
        "enabled": record.enabled,
    }


async def _create(
    request: web.Request, caller: Caller | None, deps: Deps, thread_id: str | None
) -> web.StreamResponse:
    body = await body_of(request)
    require(caller, THREADS_WRITE)
    schedule = check_schedule(body.get("schedule"))
    timezone = field(body, "timezone", str)
    _zone(timezone)
    end_time = _end_time(body.get("end_time"))
    enabled = field(body, "enabled", bool, True)
    on_run_completed = body.get("on_run_completed")
    if on_run_completed not in (None, "delete", "keep"):
        raise ApiError(422, "on_run_completed must be 'delete' or 'keep'")
    if thread_id is not None:
        # A thread's cron runs on it: LangGraph's server answers null here.
        await thread_or_404(deps, caller, thread_id)
        on_run_completed = None
    else:
        on_run_completed = on_run_completed or "delete"
    payload = {k: v for k, v in body.items() if k not in CRON_KEYS}
    metadata = field(body, "metadata", dict, {})
    run_start.check_run_body(payload)
    # A webhook that could not be delivered is refused now, not at each tick.
    await webhooks.check(deps, payload.get("webhook"))
    assistant = await assistants.resolve(deps, caller, payload.get("assistant_id"))
    payload["assistant_id"] = assistant.assistant_id
    cron_id = str(uuid.uuid4())
    user = request.get(end_users.END_USER)
    value: dict[str, Any] = {
        "payload": payload,
        "schedule": schedule,
        "cron_id": cron_id,
        "thread_id": thread_id,
        "user_id": user.identity if user is not None else None,
        "end_time": body.get("end_time"),
        "metadata": metadata,
    }
    await end_users.authorize(request, deps, "crons", "create", value)
    stamped = value.get("metadata")
    now = time.time()
    record = CronRecord(
        cron_id=cron_id,
        kind=CRON,
        assistant_id=assistant.assistant_id,
        thread_id=thread_id,
        run_id=None,
        schedule=schedule,
        timezone=timezone,
        payload=payload,
        metadata=dict(stamped) if isinstance(stamped, dict) else metadata,
        webhook=payload.get("webhook"),
        on_run_completed=on_run_completed,
        end_time=end_time,
        enabled=enabled,
        owner=auth.identity(caller),
        acts_as=run_start.acts_as(caller),
        user_id=value["user_id"],
        next_run_at=None,
        created_at=now,
        updated_at=now,
    )
    first = _next_after(record, now)
    record = replace(record, next_run_at=first)
    await deps.engine.crons.put(record)
    return json_response(shape(record))


async def create(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """A cron whose every run is on a new thread (POST /runs/crons)."""
    return await _create(request, caller, deps, None)


async def create_for_thread(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    """A cron whose runs are on this thread (POST /threads/{thread_id}/runs/crons)."""
    return await _create(request, caller, deps, thread_id_of(request))


def _cron_id(request: web.Request) -> str:
    value = request.match_info["cron_id"]
    try:
        uuid.UUID(value)
    except ValueError:
        raise ApiError(422, f"cron_id: {value!r} is not a UUID") from None
    return value


async def _visible(
    request: web.Request, caller: Caller | None, deps: Deps, action: str
) -> CronRecord:
    """The path's cron, if the caller may see it (its owner's, operators'; the auth
    handler's filter for `action` on its metadata): else not found."""
    cron_id = _cron_id(request)
    record = await deps.engine.crons.get(cron_id)
    filters = await end_users.authorize(request, deps, "crons", action, {"cron_id": cron_id})
    if (
        record is None
        or record.kind != CRON
        or not sees_owned(caller, record.owner)
        or (filters and not matches(record.metadata, filters))
    ):
        raise not_found(f"cron {cron_id}")
    return record


async def get(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    return json_response(shape(await _visible(request, caller, deps, "read")))


async def delete(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, THREADS_WRITE)
    record = await _visible(request, caller, deps, "delete")
    await deps.engine.crons.delete(record.cron_id)
    return web.Response(status=204)


async def update(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """PATCH /runs/crons/{cron_id}: schedule, end_time (null clears it), enabled,
    on_run_completed, timezone; metadata merged; the run's keys merged into its
    payload. A new schedule or timezone starts from its next tick after now."""
    require(caller, THREADS_WRITE)
    body = await body_of(request)
    if not body:
        raise ApiError(400, "the body is empty: send what to change")
    record = await _visible(request, caller, deps, "update")
    changes: dict[str, Any] = {}
    schedule, timezone = record.schedule, record.timezone
    if body.get("schedule") is not None:
        schedule = changes["schedule"] = check_schedule(body["schedule"])
    if body.get("timezone") is not None:
        timezone = changes["timezone"] = field(body, "timezone", str)
        _zone(timezone)
    if "end_time" in body:
        changes["end_time"] = _end_time(body["end_time"])
    if body.get("enabled") is not None:
        changes["enabled"] = field(body, "enabled", bool)
    if body.get("on_run_completed") is not None:
        if body["on_run_completed"] not in ("delete", "keep"):
            raise ApiError(422, "on_run_completed must be 'delete' or 'keep'")
        changes["on_run_completed"] = body["on_run_completed"]
    if body.get("metadata") is not None:
        changes["metadata"] = {**record.metadata, **field(body, "metadata", dict)}
    given = {k: body[k] for k in PAYLOAD_KEYS if body.get(k) is not None}
    if given:
        payload = {**record.payload, **given}
        run_start.check_run_body(payload)
        await webhooks.check(deps, given.get("webhook"))
        changes["payload"] = payload
        if "webhook" in given:
            changes["webhook"] = given["webhook"]
    if "schedule" in changes or "timezone" in changes:
        moved = replace(record, schedule=schedule, timezone=timezone)
        changes["next_run_at"] = _next_after(moved, time.time())
    updated = await deps.engine.crons.update(record.cron_id, changes)
    if updated is None:
        raise not_found(f"cron {record.cron_id}")
    return json_response(shape(updated))


async def _matching(request: web.Request, caller: Caller | None, deps: Deps) -> list[CronRecord]:
    """The crons a search or count asks for that the caller sees."""
    body = await body_of(request)
    assistant_id = field(body, "assistant_id", str)
    thread_id = field(body, "thread_id", str)
    enabled = field(body, "enabled", bool)
    metadata = field(body, "metadata", dict, {})
    filters = await end_users.authorize(
        request,
        deps,
        "crons",
        "search",
        {"assistant_id": assistant_id, "thread_id": thread_id, "metadata": metadata},
    )
    if assistant_id is not None:
        with contextlib.suppress(ApiError):
            # A graph's name stands for its default assistant, as in a run.
            assistant_id = (await assistants.resolve(deps, caller, assistant_id)).assistant_id
    found = []
    for record in await deps.engine.crons.all():
        if (
            (assistant_id is not None and record.assistant_id != assistant_id)
            or (thread_id is not None and record.thread_id != thread_id)
            or (enabled is not None and record.enabled != enabled)
            or any(record.metadata.get(k) != v for k, v in metadata.items())
            or not sees_owned(caller, record.owner)
            or (filters and not matches(record.metadata, filters))
        ):
            continue
        found.append(record)
    return found


async def search(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    body = await body_of(request)
    limit, offset = limit_offset(body)
    sort_by = field(body, "sort_by", str, "created_at")
    if sort_by not in SORT_BY:
        raise ApiError(422, f"sort_by must be one of {', '.join(SORT_BY)}")
    order = field(body, "sort_order", str, "desc").lower()
    if order not in ("asc", "desc"):
        raise ApiError(422, "sort_order must be 'asc' or 'desc'")
    select = field(body, "select", list, [])
    unknown = sorted(set(select) - FIELDS)
    if unknown:
        raise ApiError(422, f"select: no cron field {', '.join(map(str, unknown))}")
    shaped = [shape(r) for r in await _matching(request, caller, deps)]
    shaped.sort(key=lambda c: str(c.get(sort_by) or ""), reverse=order == "desc")
    page = shaped[offset : offset + limit]
    if select:
        page = [{k: v for k, v in c.items() if k in select} for c in page]
    response = json_response(page)
    if offset + limit < len(shaped):
        response.headers["X-Pagination-Next"] = str(offset + limit)
    return response


async def count(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    return json_response(len(await _matching(request, caller, deps)))


# -- the scheduler ------------------------------------------------------------------


class _Scheduled:
    """The origin of a run a cron or a later run starts (operations/origin.py):
    the scheduler, with no caller assertion."""

    def peer(self) -> str:
        return "scheduler:crons"

    def invocation_metadata(self) -> None:
        return None


_SCHEDULED: Final = _Scheduled()


class _Gone(Exception):
    """The token a cron's runs start under is not in the tokens file any more."""


class CronScheduler:
    """Fires the due crons and runs started later, on every replica: each pass
    claims the due ticks (journal/crons.py), starts their runs through
    `run_start.launch`, and moves each on by the catch-up rule. It sleeps until the
    earliest tick owed, at most `interval` (a row made on another replica is
    seen within it)."""

    def __init__(self, deps: Deps, *, interval: float = 1.0, batch: int = 50) -> None:
        self.deps = deps
        self.interval = interval
        self.batch = batch
        # This process's claims: a replica restarted is another claimer.
        self.claimer = f"crons-{uuid.uuid4().hex[:12]}"
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="cron-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.run_pass()
                earliest = await self.deps.engine.crons.earliest()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("cron scheduler pass failed; retrying next interval")
                earliest = None
            # Until the next tick owed; a tick past due (claimed elsewhere, or whose
            # graph no replica serves yet) is looked at again an interval later.
            wait = self.interval
            if earliest is not None and earliest > time.time():
                wait = min(wait, max(earliest - time.time(), 0.01))
            await asyncio.sleep(wait)

    async def run_pass(self) -> int:
        """Fire what is due now; returns how many ticks this replica claimed."""
        claimed_at, claimed = await self.deps.engine.crons.claim_due(
            self.claimer, claim_lease, self.batch
        )
        if claimed:
            await asyncio.gather(*(self._fire(r, claimed_at) for r in claimed))
        return len(claimed)

    def _caller(self, record: CronRecord) -> Caller | None:
        tokens = self.deps.tokens
        if tokens is None:
            return None
        who = record.acts_as
        # names() is keyed by the token's hash: the maker's token is found by its name.
        caller = next((c for c in tokens.names().values() if c.name == who.get("name")), None)
        if caller is None or caller.role != who.get("role") or caller.agent != who.get("agent"):
            raise _Gone(f"token {who.get('name')!r}, which made it, is not in the tokens file")
        return caller

    async def _fire(self, record: CronRecord, claimed_at: float) -> None:
        tick = record.next_run_at
        assert tick is not None
        crons = self.deps.engine.crons
        is_cron = record.kind == CRON
        if is_cron:
            run_id = tick_run_id(record.cron_id, tick)
            new_thread = None if record.thread_id else tick_thread_id(record.cron_id, tick)
            stamped = {**record.metadata, "cron_id": record.cron_id}
        else:
            assert record.run_id is not None
            run_id, new_thread, stamped = record.run_id, None, record.metadata
        # The catch-up rule: the next tick after this claim, not after the tick owed.
        after = _next_after(record, claimed_at) if is_cron else None
        if not await self._served(record):
            # No replica serves its graph now (all down, or not back after a
            # restart): the claim lapses and the tick is tried again then.
            log.info("%s %s: no replica serves its graph yet", record.kind, record.cron_id)
            return
        try:
            caller = self._caller(record)
            body = dict(record.payload)
            if record.webhook is not None:
                body["webhook"] = record.webhook
            await run_start.launch(
                self.deps,
                caller,
                body,
                record.thread_id,
                stamped,
                origin=_SCHEDULED,
                run_id=run_id,
                new_thread_id=new_thread,
            )
        except asyncio.CancelledError:
            raise
        except (NotAnswered, ApiError) as exc:
            if isinstance(exc, NotAnswered) or exc.status >= 500:
                # No replica of its graph answered: the claim lapses and the tick
                # is tried again then (late, not lost).
                log.warning("cron %s: its run could not start yet: %s", record.cron_id, exc)
                return
            await self._refused(record, tick, after, str(exc))
            return
        except Exception as exc:
            await self._refused(record, tick, after, str(exc) or type(exc).__name__)
            return
        if is_cron:
            await crons.advance(record.cron_id, self.claimer, tick, after, fired=True)
        else:
            await crons.finish_once(record.cron_id, self.claimer, tick)
        log.info("%s %s: run %s started", record.kind, record.cron_id, run_id)

    async def _served(self, record: CronRecord) -> bool:
        assistant = await self.deps.engine.assistants.get(record.assistant_id)
        if assistant is None or assistant.graph_id in self.deps.directory.agents():
            return True  # (an assistant deleted since: its run is refused, said why)
        try:
            await assistants.describe(self.deps, None, assistant.graph_id)
        except (ApiError, NotAnswered):
            return False
        return True

    async def _refused(
        self, record: CronRecord, tick: float, after: float | None, why: str
    ) -> None:
        """Its run was refused (its thread busy under 'reject', its assistant gone, its
        token revoked): this tick is skipped and said why; a run started later ends
        there, `error`."""
        log.warning("%s %s: its run was refused: %s", record.kind, record.cron_id, why)
        await self.deps.engine.crons.advance(
            record.cron_id, self.claimer, tick, after, fired=False, error=why
        )
