"""Runs: a run is a turn. Creating one asks the assistant's agent to start a turn
(``responses/create`` through the relay, with the caller's signed assertion), so it
is journaled, re-driven, parked, cancelled and fenced like any turn, and its id is
the turn id everywhere (TurnStatus, the console, the CLI, NATS).

Every run is a new turn, a resume too, as LangGraph's server makes every run a new
run (decision 294): a run on a thread whose turn waits at an interrupt ends that
turn (DONE, answered: its run stopped at the interrupt, LangGraph's `success`) and
goes on from the thread's checkpoint with its own input or ``Command``. So input
null re-runs the interrupted node (which asks again), new input starts over, and a
``Command`` with resume, update and goto answers the interrupt. A run's metadata,
kwargs and strategy are stored beside its turn (journal/runs.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from turnkeeper._run_request import default_assistant_id, merge_assistant, parse_run_request
from turnkeeper.v1 import turns_pb2

from turnkeeper_server import limits as lim
from turnkeeper_server.engine.watch import Rewound
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal.crons import ONCE, CronRecord
from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.operations.origin import Origin
from turnkeeper_server.records import ENDED, PARKED, QUEUED, EventRecord, TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import (
    assistants,
    end_users,
    handoff_start,
    rights,
    shapes,
    webhooks,
)
from turnkeeper_server.web.langgraph.api import (
    CANCEL_RIGHT,
    READ,
    THREADS_WRITE,
    Deps,
    body_of,
    field,
    json_response,
    limit_offset,
    require,
    run_or_404,
    sees_owned,
    thread_id_of,
    thread_or_404,
)
from turnkeeper_server.web.langgraph.errors import ApiError, not_found
from turnkeeper_server.web.langgraph.stream import (
    Translator,
    held,
    live_id,
    modes_of,
    position_of,
    sse,
)
from turnkeeper_server.web.pump import HEADERS as SSE_HEADERS
from turnkeeper_server.web.pump import Frame, Outcome

log = logging.getLogger(__name__)

# What LangGraph's runs take that turnkeeper does not do yet (docs/langgraph-api.md).
NOT_YET: Final[tuple[str, ...]] = ()
# What runs.list's `select` may name: a run's fields (shapes.run), and the SDK's
# `cancel_reason`, which a run here does not carry (selected, it is left out).
RUN_FIELDS: Final = frozenset(
    {
        "cancel_reason",
        "run_id",
        "thread_id",
        "assistant_id",
        "created_at",
        "updated_at",
        "status",
        "metadata",
        "multitask_strategy",
        "kwargs",
    }
)
# The longest a run may be started later (after_seconds), a year.
MAX_AFTER_SECONDS: Final = 366 * 24 * 3600
# How often a join of a run started later looks whether it started.
LATER_POLL_SECONDS = 0.25
# How many of a thread's newest runs are looked through for the interrupted one.
PARKED_LOOKBACK: Final = 100
# How often runs.wait sends a keep-alive newline while its run goes on (LangGraph's
# server: "\n" every 5 s; leading whitespace is ignored by JSON parsers).
WAIT_KEEPALIVE_SECONDS = 5.0
# How often a stream that cancels its run on disconnect looks at its connection.
DISCONNECT_POLL_SECONDS = 0.1
# The kwargs a run records, as LangGraph's server records them (its RunKwargs).
KWARGS: Final = ("input", "command", "config", "context")
WATCH_RIGHT: Final = "/turnkeeper.v1.TurnService/WatchTurn"
# A stream's choice of how tokens go out, over the service's (--langgraph-stream).
STREAM_HEADER: Final = "X-Turnkeeper-Stream"


def _thread_path(request: web.Request) -> str | None:
    return thread_id_of(request) if "thread_id" in request.match_info else None


@dataclass(frozen=True)
class Started:
    """A run started: its turn, its body, its record (metadata, kwargs)."""

    turn: TurnRecord
    body: dict[str, Any]
    record: RunRecord


def _refuse_weaker_durability(body: dict[str, Any]) -> None:
    """What would make a run less durable than turnkeeper runs every run, refused
    (decision 325): every step is checkpointed before the next, so a crash loses
    nothing. ``durability`` ``sync`` and ``async`` are both met by that; ``exit``
    (a checkpoint only at the end) and ``checkpoint_during: false`` are not
    applied, so they are refused rather than ignored; so is ``on_completion:
    delete`` (a thread-less run keeps its thread here, docs/langgraph-api.md)."""
    if body.get("durability") not in (None, "sync", "async"):
        raise ApiError(
            422,
            "durability: turnkeeper checkpoints every step (durability 'sync'); "
            "send 'sync', 'async' or nothing",
        )
    if body.get("checkpoint_during") not in (None, True):
        raise ApiError(
            422,
            "checkpoint_during: turnkeeper checkpoints every step; send true or nothing",
        )
    if body.get("on_completion") not in (None, "keep"):
        raise ApiError(
            422,
            "on_completion: a thread-less run keeps its thread on turnkeeper "
            "(delete it with threads.delete); send 'keep' or nothing",
        )


def refuse_not_yet(body: dict[str, Any]) -> None:
    given = [k for k in NOT_YET if body.get(k) not in (None, [], {})]
    if given:
        raise ApiError(
            422, f"{', '.join(given)}: not supported by turnkeeper yet (docs/langgraph-api.md)"
        )


async def start_run(request: web.Request, caller: Caller | None, deps: Deps) -> Started:
    """Validate the run, make its thread if asked, start its turn (a new one, a
    resume too: the thread's parked turn ends, answered)."""
    body = await body_of(request)
    refuse_not_yet(body)
    if body.get("after_seconds") not in (None, 0):
        raise ApiError(
            422, "after_seconds: only runs.create starts a run later; stream or join it then"
        )
    thread_id = _thread_path(request)
    # A langgraph.json's auth: the thread's filter, and what a thread this run makes
    # is stamped with (the run's metadata as its handler left it, LangGraph's rule).
    stamped = await end_users.create_run(request, deps, thread_id, body)
    return await launch(deps, caller, body, thread_id, stamped, origin=HttpContext(request))


def check_run_body(body: dict[str, Any]) -> None:
    """What launch refuses before anything starts, checked early (a cron's or a
    later run's body, when it is made)."""
    _refuse_weaker_durability(body)
    try:
        parse_run_request(body)
        modes_of(body.get("stream_mode"))
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None


async def launch(
    deps: Deps,
    caller: Caller | None,
    body: dict[str, Any],
    thread_id: str | None,
    stamped: dict[str, Any],
    *,
    origin: Origin,
    run_id: str | None = None,
    new_thread_id: str | None = None,
) -> Started:
    """Start the run `body` asks for, for `caller`, on `thread_id` (None: a new
    thread, `new_thread_id` or a fresh id), its metadata with `stamped` (an auth
    handler's, a cron's). `run_id`: the run's id, given by a cron's tick or a run
    started later; a run of that id that started already is answered as it is
    (firing a tick twice starts one run). Every run goes through here: POST /runs,
    /threads/{id}/runs, their stream and wait, and what crons fire."""
    if run_id is not None and (existing := deps.engine.turns.get(run_id)) is not None:
        found = await _record(deps, existing)
        return Started(existing, body, found or RunRecord(run_id))
    _refuse_weaker_durability(body)
    # Refused now when it can be known now: no secret, a URL or address not allowed.
    await webhooks.check(deps, body.get("webhook"))
    try:
        run = parse_run_request(body)
        modes = modes_of(body.get("stream_mode"))
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None
    # The assistant (a graph's default by the graph's name too), whose graph is the
    # agent; its config and context under the run's, journaled with the run.
    relayed = handoff_start.needs_agent(run.input, run.options.as_dict())
    # A run the service starts itself waits, `pending`, for a replica of its graph.
    assistant = await assistants.for_run(deps, caller, body.get("assistant_id"), served=relayed)
    agent = assistant.graph_id
    try:
        merged = merge_assistant(
            run,
            config=assistant.config,
            context=assistant.context,
            assistant_id=None
            if assistant.assistant_id == default_assistant_id(agent)
            else assistant.assistant_id,
        )
    except ValueError as exc:
        raise ApiError(400, str(exc)) from None

    # A run tags its thread with its graph, as LangGraph's server does (one write,
    # and none when the thread already says so).
    tagged = {"graph_id": agent, "assistant_id": assistant.assistant_id}
    owner = auth.identity(caller)
    if thread_id is None:
        thread_id = new_thread_id or str(uuid.uuid4())
        thread = await deps.engine.threads.ensure(thread_id, {**tagged, **stamped}, owner)
    elif (record := await deps.engine.threads.get(thread_id)) is None:
        if run.if_not_exists != "create":
            raise not_found(f"thread {thread_id}")
        thread = await deps.engine.threads.ensure(thread_id, {**tagged, **stamped}, owner)
    else:
        thread = await thread_or_404(deps, caller, thread_id)
        # Whose thread it is decides who answers its interrupt (rights.py).
        owner = record.owner
        if any(record.metadata.get(k) != v for k, v in tagged.items()):
            thread = await deps.engine.threads.update_metadata(thread_id, tagged) or thread

    # At most one turn of a thread is live; queued ones may be newer.
    recent = await deps.engine.threads.turns(thread_id, limit=PARKED_LOOKBACK)
    parked = next((t for t in recent if t.state == PARKED), None)
    options = run.options.as_dict()
    # Answering the interrupt, editing the state, forking: rights of their own.
    needed = rights.of_run(options)
    answers = "resume" in (options.get("command") or {})
    target = parked.turn_id if parked is not None and answers else thread_id
    await rights.refuse_unless(deps, caller, needed, target, owner)
    run_id = run_id or str(uuid.uuid4())
    if parked is not None:
        # LangGraph's server: the run that stopped at the interrupt is over; this
        # one goes on from the thread's checkpoint.
        await deps.engine.turns.close_parked(
            thread_id=thread_id, detail=f"answered by run {run_id}"
        )
    params: dict[str, Any] = {
        "input": run.input,
        "thread_id": thread_id,
        "turn_id": run_id,
        "background": True,
        "multitask_strategy": run.multitask_strategy,
    }
    if given_options := merged.as_dict():
        # Journaled with the run, so a re-drive runs it the same way.
        params["run"] = given_options
    if relayed:
        # Only the graph says whether the thread has anything to continue: the agent
        # starts it (StartTurn audits it, naming the caller the agent acts for).
        started = await deps.relay.call(caller, agent, auth.JSONRPC_CREATE, params)
        if not isinstance(started, dict) or not started.get("turn_id"):
            raise ApiError(409, f"thread {thread_id} has nothing to run: send input")
    else:
        # Journaled here and handed to a replica in one message (decision 370).
        await handoff_start.start(
            deps,
            caller,
            origin,
            agent=agent,
            thread_id=thread_id,
            run_id=run_id,
            strategy=run.multitask_strategy,
            journaled_input=handoff_start.journaled(run.input, given_options),
        )
    # As LangGraph's server merges a run's metadata: the assistant's, the thread's,
    # the run's own (its auth handler's say included); its assistant id last.
    metadata = {
        **assistant.metadata,
        **thread.metadata,
        **field(body, "metadata", dict, {}),
        **stamped,
        "assistant_id": assistant.assistant_id,
    }
    kwargs = {name: body.get(name) for name in KWARGS} | {
        "stream_mode": _mode_list(body.get("stream_mode"), modes),
        "interrupt_before": body.get("interrupt_before"),
        "interrupt_after": body.get("interrupt_after"),
        # Delivered when the run ends (journal/webhooks.py, webhooks/delivery.py);
        # checked above (a cron's when the cron is made).
        "webhook": body.get("webhook") or None,
        "feedback_keys": body.get("feedback_keys"),
        # A thread-less run's thread is kept here (docs/langgraph-api.md), and every
        # run's stream can be resumed with Last-Event-ID.
        "temporary": False,
        "subgraphs": bool(body.get("stream_subgraphs", False)),
        "resumable": True,
        "checkpoint_during": body.get("checkpoint_during", True),
        "durability": body.get("durability") or "async",
    }
    stored = RunRecord(run_id, metadata, _json_safe(kwargs), run.multitask_strategy)
    await deps.engine.threads.put_run(stored)
    turn = deps.engine.turns.get(run_id)
    if turn is None:  # erased between its start and here
        raise not_found(f"run {run_id}")
    if turn.state == QUEUED:
        # Queued behind a run that has stopped at an interrupt since (the park saw
        # no record of this run yet): that run is over, this one starts.
        await deps.engine.turns.hand_to_queued_run(thread_id=thread_id)
        turn = deps.engine.turns.get(run_id) or turn
    return Started(turn, body, stored)


def acts_as(caller: Caller | None) -> dict[str, Any]:
    """The token a run started later (a cron's, an after_seconds run) starts under:
    its maker's, looked up again by name when it fires (tokens.names)."""
    if caller is None:
        return {}
    return {"name": caller.name, "role": caller.role, "agent": caller.agent}


def after_seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ApiError(422, "after_seconds must be a number of seconds, not negative")
    if value > MAX_AFTER_SECONDS:
        raise ApiError(422, f"after_seconds must be at most {MAX_AFTER_SECONDS} (a year)")
    return float(value)


async def _start_later(request: web.Request, caller: Caller | None, deps: Deps) -> CronRecord:
    """A run that starts `after_seconds` from now: its thread made (or checked) and
    its run id given now, kept in the journal as a one-shot schedule (journal/
    crons.py, kind 'once') that a replica fires when due, across restarts; until
    then the run is `pending`."""
    body = await body_of(request)
    refuse_not_yet(body)
    delay = after_seconds(body.get("after_seconds"))
    payload = {k: v for k, v in body.items() if k != "after_seconds"}
    check_run_body(payload)
    require(caller, THREADS_WRITE)
    assistant = await assistants.resolve(deps, caller, body.get("assistant_id"))
    thread_id = _thread_path(request)
    stamped = await end_users.create_run(request, deps, thread_id, body)
    tagged = {"graph_id": assistant.graph_id, "assistant_id": assistant.assistant_id}
    owner = auth.identity(caller)
    if thread_id is None:
        thread_id = str(uuid.uuid4())
        await deps.engine.threads.ensure(thread_id, {**tagged, **stamped}, owner)
    elif await deps.engine.threads.get(thread_id) is None:
        if body.get("if_not_exists") != "create":
            raise not_found(f"thread {thread_id}")
        await deps.engine.threads.ensure(thread_id, {**tagged, **stamped}, owner)
    else:
        await thread_or_404(deps, caller, thread_id)
    now = time.time()
    user = request.get(end_users.END_USER)
    record = CronRecord(
        cron_id=str(uuid.uuid4()),
        kind=ONCE,
        assistant_id=assistant.assistant_id,
        thread_id=thread_id,
        run_id=str(uuid.uuid4()),
        schedule="",
        timezone=None,
        payload=payload,
        metadata=stamped,
        webhook=payload.get("webhook"),
        on_run_completed=None,
        end_time=None,
        enabled=True,
        owner=owner,
        acts_as=acts_as(caller),
        user_id=user.identity if user is not None else None,
        next_run_at=now + delay,
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
        "kwargs": {name: payload.get(name) for name in KWARGS},
    }


async def _later_or_404(
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


async def _started(
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
    await _later_or_404(deps, caller, thread_id, run_id)
    while True:
        if deps.engine.turns.get(run_id) is not None:
            return run_or_404(deps, caller, thread_id, run_id)
        later = await deps.engine.crons.by_run(run_id)
        if later is None and deps.engine.turns.get(run_id) is None:
            raise not_found(f"run {run_id}")
        if later is not None and later.next_run_at is None:
            raise ApiError(409, f"run {run_id} was refused when due: {later.last_error}")
        await asyncio.sleep(LATER_POLL_SECONDS)


def _mode_list(raw: Any, modes: frozenset[str]) -> list[str]:
    """The run's stream modes as it gave them (in its order), or the default."""
    if isinstance(raw, str):
        return [raw]
    if isinstance(raw, list) and raw:
        return list(dict.fromkeys(raw))
    return sorted(modes)


def _json_safe(value: dict[str, Any]) -> dict[str, Any]:
    """`value` as it reads back from JSON (the body came as JSON: a round trip)."""
    result: dict[str, Any] = json.loads(json.dumps(value, default=str))
    return result


def _locations(turn: TurnRecord, then: str = "stream") -> dict[str, str]:
    """Where the run is, and where its client goes on (the SDK follows `Location`
    when its connection drops: a stream to the run's stream, a wait to its join)."""
    run = f"/threads/{turn.thread_id}/runs/{turn.turn_id}"
    return {"Content-Location": run, "Location": f"{run}/{then}"}


def _stored_modes(record: RunRecord | None) -> frozenset[str]:
    """The modes the run was created with (LangGraph's `values` for a turn that has
    no run record: one started through another door)."""
    raw = record.kwargs.get("stream_mode") if record is not None else None
    try:
        return modes_of(raw or None)
    except ValueError:
        return frozenset({"values"})


async def _record(deps: Deps, turn: TurnRecord) -> RunRecord | None:
    return (await deps.engine.threads.runs([turn.turn_id])).get(turn.turn_id)


async def create(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    if (await body_of(request)).get("after_seconds") not in (None, 0):
        return json_response(later_shape(await _start_later(request, caller, deps)))
    started = await start_run(request, caller, deps)
    # As LangGraph's server answers a create: the run, pending (its worker has not
    # picked it up yet; here the turn may already run).
    response = json_response(shapes.run(started.turn, started.record, status="pending"))
    response.headers["Content-Location"] = _locations(started.turn)["Content-Location"]
    return response


async def stream(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    kind = stream_kind(request, deps)  # refused before a run starts
    started = await start_run(request, caller, deps)
    return await _stream(
        request,
        caller,
        deps,
        kind,
        started.turn,
        modes_of(started.body.get("stream_mode")),
        after=0,
        fresh=True,
        cancel_on_disconnect=started.body.get("on_disconnect") == "cancel",
        subgraphs=bool(started.record.kwargs.get("subgraphs")),
    )


def last_event_id(request: web.Request, turn: TurnRecord) -> int:
    """The seq a joining client has: its `Last-Event-ID`, or 0 (none: the whole
    run). An id that is not one of this stream's (not a whole number in range) is
    read as LangGraph's server reads an id it has no event for: nothing is replayed,
    the stream goes on from the run's newest event."""
    raw = request.headers.get("Last-Event-ID", "").strip()
    if not raw:
        return 0
    try:
        return lim.check_seq("Last-Event-ID", max(int(raw), 0))
    except (ValueError, InvalidArgument):
        return turn.last_seq


async def join_stream(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    require(caller, WATCH_RIGHT)
    turn = await _started(deps, caller, _thread_path(request), request.match_info["run_id"])
    # A live stream's ids name the attempt too (stream.py live_id); a settled one's
    # are bare seqs, whose attempt is not needed: nothing settled is taken back.
    after, after_attempt = position_of(last_event_id(request, turn))
    # langgraph-sdk sends `stream_mode=` (empty) when its caller gives none: none,
    # and then the run's own modes, as LangGraph's server streams what the run does.
    given = [mode for mode in request.query.getall("stream_mode", []) if mode]
    record = await _record(deps, turn)
    try:
        modes = modes_of(given) if given else _stored_modes(record)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None
    cancel = request.query.get("cancel_on_disconnect", "").lower() in ("true", "1", "yes")
    return await _stream(
        request,
        caller,
        deps,
        stream_kind(request, deps),
        turn,
        modes,
        after=after,
        fresh=after == 0,
        cancel_on_disconnect=cancel,
        after_attempt=after_attempt,
        # As the run streams: with its subgraphs' parts if it was made with them.
        subgraphs=record is not None and bool(record.kwargs.get("subgraphs")),
    )


def stream_kind(request: web.Request, deps: Deps) -> str:
    """ "live" or "settled": what the request's X-Turnkeeper-Stream asks, else the
    service's setting."""
    asked = request.headers.get(STREAM_HEADER, "").strip().lower()
    if not asked:
        return deps.stream
    if asked not in ("live", "settled"):
        raise ApiError(422, f"{STREAM_HEADER} must be 'live' or 'settled' (docs/langgraph-api.md)")
    return asked


async def _live_parts(
    deps: Deps, turn: TurnRecord, translator: Translator, after: int, after_attempt: int | None
) -> AsyncGenerator[Frame, None]:
    """Settled parts, and message parts as the model produces them; a rewind that
    takes streamed messages back is sent as `values` and `remove` parts
    (stream.py `Translator.rewound`)."""
    attempts: dict[int, int] = {}

    def prime(upto: int) -> None:
        for event in deps.engine.turns.events(turn.turn_id, 0, upto):
            attempts[event.seq] = event.attempt
            translator.parts(event)
        translator.settled()

    if after > 0:
        prime(after)
    async for item in deps.engine.turns.watch_live(
        turn.turn_id, after, after_attempt=after_attempt, waits=held
    ):
        if isinstance(item, Rewound):
            if not item.taken:
                # A resume from a position taken back: the state is the one at
                # the seq that still stands, not what the journal now has up to
                # the resume's seq.
                translator.reset()
                attempts.clear()
                prime(item.seq)
            at = attempts.get(item.seq)
            rewind_id = None if at is None else live_id(item.seq, at)
            for name, data in translator.rewound(item.taken):
                yield Frame(sse(name, data, id=rewind_id), item.seq or None)
            continue
        event: EventRecord = item
        attempts[event.seq] = event.attempt
        for name, data in translator.parts(event):
            yield Frame(sse(name, data, id=live_id(event.seq, event.attempt)), event.seq)


async def _settled_parts(
    deps: Deps, turn: TurnRecord, translator: Translator, after: int
) -> AsyncGenerator[Frame, None]:
    # The state the run starts from (its thread's, as the turns before it left it):
    # what an interrupt's `values` part and the outcome add to.
    translator.start_from(await deps.engine.threads.values_before(turn))
    if after > 0:
        # What came before shapes what comes next (the last state); an interrupt
        # answered since is not pending any more.
        for event in deps.engine.turns.events(turn.turn_id, 0, after):
            translator.parts(event)
        translator.settled()
    async for event in deps.engine.turns.watch_settled(turn.turn_id, after):
        for name, data in translator.parts(event):
            yield Frame(sse(name, data, id=str(event.seq)), event.seq)


async def _stream(
    request: web.Request,
    caller: Caller | None,
    deps: Deps,
    kind: str,
    turn: TurnRecord,
    modes: frozenset[str],
    *,
    after: int,
    fresh: bool,
    cancel_on_disconnect: bool,
    after_attempt: int | None = None,
    subgraphs: bool = False,
) -> web.StreamResponse:
    """`after`: the seq the client has (or the run's events begin after), and
    `after_attempt` the attempt that wrote it (None: unknown); `fresh`: a new stream,
    which starts with the run's metadata."""
    translator = Translator(
        turn.turn_id, modes, context=_context(request, turn, caller), subgraphs=subgraphs
    )
    parts = (
        _live_parts(deps, turn, translator, after, after_attempt)
        if kind == "live"
        else _settled_parts(deps, turn, translator, after)
    )
    with web_auth.acting_as(caller):
        auth.require_right(WATCH_RIGHT)
        # WatchTurn's quota: a LangGraph stream is a watch of the turn; and like one,
        # it ends when its caller's token is revoked (the pump, web/pump.py).
        quota = deps.pump.admit(request)
    # Cancelled as soon as the client goes, not at the stream's next write.
    watcher = (
        asyncio.create_task(_cancel_when_gone(request, deps, caller, turn.turn_id))
        if cancel_on_disconnect
        else None
    )
    try:
        with quota:
            response, outcome = await deps.pump.serve(
                request,
                caller,
                parts,
                _RunFraming(turn.turn_id),
                name=f"LangGraph stream of run {turn.turn_id}",
                after=after,
                preamble=sse("metadata", {"run_id": turn.turn_id, "attempt": 1}) if fresh else None,
                headers=_locations(turn),
            )
    finally:
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
    if cancel_on_disconnect and outcome in (Outcome.GONE, Outcome.STALLED):
        await _cancel_quietly(deps, caller, turn.turn_id, "the streaming client went away")
    return response


def _context(request: web.Request, turn: TurnRecord, caller: Caller | None) -> dict[str, Any]:
    """What a message part's metadata says of its run, as LangGraph's server's does
    (the rest is the model call's own, journaled by the agent)."""
    context: dict[str, Any] = {
        "created_by": "system",
        "graph_id": turn.agent,
        "assistant_id": turn.agent,
        "langgraph_host": "self-hosted",
        "langgraph_api_url": f"{request.scheme}://{request.host}",
        "thread_id": turn.thread_id,
        "run_id": turn.turn_id,
    }
    user = request.get(end_users.END_USER)
    if user is not None:
        context["user_id"] = user.identity
    return context


async def _client_gone(request: web.Request) -> None:
    """Returns once the request's connection is closed. aiohttp tells a handler only
    at its next write (handler cancellation is off) and offers no event for it; the
    transport's state is what there is, so it is looked at every
    DISCONNECT_POLL_SECONDS."""
    while (transport := request.transport) is not None and not transport.is_closing():  # noqa: ASYNC110
        await asyncio.sleep(DISCONNECT_POLL_SECONDS)


async def _cancel_when_gone(
    request: web.Request, deps: Deps, caller: Caller | None, run_id: str
) -> None:
    await _client_gone(request)
    await _cancel_quietly(deps, caller, run_id, "the streaming client went away")


class _RunFraming:
    """A run stream's own frames besides its parts (LangGraph's server's)."""

    heartbeat: Final = b": heartbeat\n\n"

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def revoked(self) -> bytes:
        return sse("error", {"error": "Unauthenticated", "message": "the token was revoked"})

    def failed(self, exc: Exception) -> bytes:
        log.error("LangGraph stream of run %s failed", self.run_id, exc_info=exc)
        return sse("error", {"error": "StreamError", "message": str(exc)})

    async def ended(self, last_seq: int) -> None:
        return None


async def _cancel_quietly(deps: Deps, caller: Caller | None, run_id: str, why: str) -> None:
    turn = deps.engine.turns.get(run_id)
    if turn is None or turn.state in ENDED:
        return
    with contextlib.suppress(Exception), web_auth.acting_as(caller):
        await deps.operations.turns.cancel(
            turns_pb2.CancelTurnRequest(turn_id=run_id, reason=why), None
        )


async def _outcome(deps: Deps, turn: TurnRecord, after: int = 0) -> Any:
    """The run's end state (runs.wait, runs.join): its events after `after`, with
    the state before them as the starting point."""
    translator = Translator(turn.turn_id, frozenset({"values"}))
    await _drain(_settled_parts(deps, turn, translator, after))
    return translator.outcome()


async def _drain(items: AsyncIterator[Any]) -> None:
    """Read `items` to their end: what reading them does is the point (a translator
    fed, a run waited for)."""
    async for _ in items:
        continue


async def wait(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """The run's outcome as JSON, as LangGraph's server answers it: the 200 goes out
    at once and a newline every WAIT_KEEPALIVE_SECONDS keeps the connection open
    while the run goes on (JSON parsers skip leading whitespace); `Location` is the
    run's join, which the SDK follows when the connection drops."""
    started = await start_run(request, caller, deps)
    turn = started.turn
    cancel_on_disconnect = started.body.get("on_disconnect") == "cancel"
    response = web.StreamResponse(
        headers={
            "Content-Type": "application/json",
            "Cache-Control": SSE_HEADERS["Cache-Control"],
            **_locations(turn, "join"),
        }
    )
    await response.prepare(request)
    outcome = asyncio.create_task(_outcome(deps, turn))
    gone = asyncio.create_task(_client_gone(request))
    try:
        while True:
            done, _ = await asyncio.wait(
                {outcome, gone}, timeout=WAIT_KEEPALIVE_SECONDS, return_when=asyncio.FIRST_COMPLETED
            )
            if outcome in done:
                try:
                    result = outcome.result()
                except Exception as exc:
                    # The 200 is out: the failure is said in the body, as a run's error.
                    log.error("runs.wait of run %s failed", turn.turn_id, exc_info=exc)
                    result = {"__error__": {"error": "StreamError", "message": str(exc)}}
                body = json.dumps(result, ensure_ascii=False, separators=(",", ":"))
                await response.write(body.encode())
                await response.write_eof()
                return response
            if gone in done:
                break
            await response.write(b"\n")
    except ConnectionResetError:
        pass
    finally:
        for task in (outcome, gone):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    # The client went away before the outcome: nothing to answer.
    if cancel_on_disconnect:
        await _cancel_quietly(deps, caller, turn.turn_id, "the waiting client went away")
    return response


async def join(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, WATCH_RIGHT)
    turn = await _started(deps, caller, _thread_path(request), request.match_info["run_id"])
    return json_response(await _outcome(deps, turn))


async def get(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    thread_id, run_id = _thread_path(request), request.match_info["run_id"]
    try:
        turn = run_or_404(deps, caller, thread_id, run_id)
    except ApiError as exc:
        if exc.status != 404:
            raise
        # A run started later, not started yet.
        return json_response(later_shape(await _later_or_404(deps, caller, thread_id, run_id)))
    return json_response(shapes.run(turn, await _record(deps, turn)))


async def list_(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    thread_id = thread_id_of(request)
    await thread_or_404(deps, caller, thread_id)
    limit, offset = limit_offset(request.query)
    status = request.query.get("status")
    turns = await deps.engine.threads.turns(
        thread_id, limit=1000 if status else limit, offset=0 if status else offset
    )
    records = await deps.engine.threads.runs([t.turn_id for t in turns])
    runs = [shapes.run(t, records.get(t.turn_id)) for t in turns]
    # Its runs started later and not started yet, newest, come first.
    if offset == 0 or status:
        waiting = [later_shape(r) for r in await deps.engine.crons.once_on_thread(thread_id)]
        runs = waiting + runs
        if not status:
            runs = runs[:limit]
    if status:
        runs = [r for r in runs if r["status"] == status][offset : offset + limit]
    if select := request.query.getall("select", []):
        unknown = sorted(set(select) - RUN_FIELDS)
        if unknown:
            raise ApiError(422, f"select: no run field {', '.join(unknown)}")
        runs = [{k: v for k, v in r.items() if k in select} for r in runs]
    return json_response(runs)


async def delete(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """A finished run's turn, events and boundaries (409 while it may still run)."""
    turn = run_or_404(deps, caller, _thread_path(request), request.match_info["run_id"])
    with web_auth.acting_as(caller):
        await deps.operations.turns.delete(turn.turn_id, HttpContext(request))
    return web.Response(status=204)


async def cancel(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    thread_id, run_id = _thread_path(request), request.match_info["run_id"]
    if deps.engine.turns.get(run_id) is None:
        # A run started later, not started yet: it never will.
        later = await _later_or_404(deps, caller, thread_id, run_id)
        require(caller, CANCEL_RIGHT)
        await deps.engine.crons.delete(later.cron_id)
        return web.Response(status=204 if request.query.get("wait") else 202)
    turn = run_or_404(deps, caller, thread_id, run_id)
    action = request.query.get("action", "interrupt")
    if action not in ("interrupt", "rollback"):
        raise ApiError(422, "action must be 'interrupt' or 'rollback'")
    wait_for_end = request.query.get("wait", "").lower() in ("true", "1")
    with web_auth.acting_as(caller):
        auth.require_right(CANCEL_RIGHT)
        if turn.state not in ENDED:
            await deps.operations.turns.cancel(
                turns_pb2.CancelTurnRequest(
                    turn_id=turn.turn_id,
                    rollback=action == "rollback",
                    reason="cancelled through the LangGraph API",
                ),
                HttpContext(request),
            )
    if wait_for_end:
        await _drain(deps.engine.turns.watch_settled(turn.turn_id, turn.last_seq))
        return web.Response(status=204)
    return web.Response(status=202)
