"""Runs: a run is a turn. Creating one asks the assistant's agent to start a turn
(``responses/create`` through the relay, with the caller's signed assertion), so it
is journaled, re-driven, parked, cancelled and fenced like any turn, and its id is
the turn id everywhere (TurnStatus, the console, the CLI, NATS).

A ``command`` with ``resume`` answers the thread's interrupted run: that turn goes
on (``responses/resumeDetached``) and its id is the run's; LangGraph's server makes
a new run for it instead (docs/langgraph-api.md says what differs).
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final

from aiohttp import web
from turnkeeper._run_request import default_assistant_id, merge_assistant, parse_run_request
from turnkeeper.v1 import turns_pb2

from turnkeeper_server import limits as lim
from turnkeeper_server.engine.watch import Rewound
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.records import ENDED, PARKED, EventRecord, TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import assistants, end_users, rights, shapes
from turnkeeper_server.web.langgraph.api import (
    READ,
    Deps,
    body_of,
    field,
    json_response,
    limit_offset,
    require,
    run_or_404,
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
from turnkeeper_server.web.pump import Frame, Outcome

log = logging.getLogger(__name__)

# What LangGraph's runs take that turnkeeper does not do yet (docs/langgraph-api.md).
NOT_YET: Final = ("after_seconds", "webhook")
# How many of a thread's newest runs are looked through for the interrupted one.
PARKED_LOOKBACK: Final = 100
WATCH_RIGHT: Final = "/turnkeeper.v1.TurnService/WatchTurn"
CANCEL_RIGHT: Final = "/turnkeeper.v1.TurnService/CancelTurn"
# A stream's choice of how tokens go out, over the service's (--langgraph-stream).
STREAM_HEADER: Final = "X-Turnkeeper-Stream"


def _thread_path(request: web.Request) -> str | None:
    return thread_id_of(request) if "thread_id" in request.match_info else None


async def start_run(
    request: web.Request, caller: Caller | None, deps: Deps
) -> tuple[TurnRecord, dict[str, Any], int]:
    """Validate the run, make its thread if asked, start (or resume) its turn.
    Returns the turn, the body, and the seq the run's own events come after (a
    resume goes on with a turn whose earlier events were the run before's)."""
    body = await body_of(request)
    given = [k for k in NOT_YET if body.get(k) not in (None, [], {})]
    if given:
        raise ApiError(
            422, f"{', '.join(given)}: not supported by turnkeeper yet (docs/langgraph-api.md)"
        )
    try:
        run = parse_run_request(body)
        modes_of(body.get("stream_mode"))
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None
    # The assistant (a graph's default by the graph's name too), whose graph is the
    # agent; its config and context under the run's, journaled with the run.
    assistant = await assistants.for_run(deps, caller, body.get("assistant_id"))
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

    thread_id = _thread_path(request)
    # A langgraph.json's auth: the thread's filter, and what a thread this run makes
    # is stamped with (the run's metadata as its handler left it, LangGraph's rule).
    stamped = await end_users.create_run(request, deps, thread_id, body)
    # A run tags its thread with its graph, as LangGraph's server does (one write,
    # and none when the thread already says so).
    tagged = {"graph_id": agent, "assistant_id": assistant.assistant_id}
    owner = auth.identity(caller)
    if thread_id is None:
        thread_id = str(uuid.uuid4())
        await deps.engine.threads.ensure(thread_id, {**tagged, **stamped}, owner)
    elif (record := await deps.engine.threads.get(thread_id)) is None:
        if run.if_not_exists != "create":
            raise not_found(f"thread {thread_id}")
        await deps.engine.threads.ensure(thread_id, {**tagged, **stamped}, owner)
    else:
        await thread_or_404(deps, caller, thread_id)
        if any(record.metadata.get(k) != v for k, v in tagged.items()):
            await deps.engine.threads.update_metadata(thread_id, tagged)

    # At most one turn of a thread is live; queued ones may be newer.
    recent = await deps.engine.threads.turns(thread_id, limit=PARKED_LOOKBACK)
    parked = [t for t in recent if t.state == PARKED]
    options = run.options.as_dict()
    # Answering the interrupt, editing the state, forking: rights of their own.
    needed = rights.of_run(options, run.resume_only)
    target = parked[0].turn_id if run.resume_only and parked else thread_id
    await rights.refuse_unless(deps, caller, needed, target)
    # A run with no input and no command on an interrupted thread goes on with it
    # (useStream's submit(null)); with a resume it answers the interrupt.
    # What the agent journals for the run's stream modes does not change what it runs.
    runs_as = {k: v for k, v in options.items() if k != "stream"}
    if run.resume_only or (parked and run.input is None and not run.command and not runs_as):
        if not parked:
            raise ApiError(409, f"thread {thread_id} has no interrupted run to resume")
        resume = run.command["resume"] if run.command else None
        run_id = parked[0].turn_id
        start_after = parked[0].last_seq
        await deps.relay.call(
            caller,
            parked[0].agent,
            auth.JSONRPC_RESUME_DETACHED,
            {"turn_id": run_id, "resume": resume},
        )
    else:
        run_id = str(uuid.uuid4())
        start_after = 0
        params = {
            "input": run.input,
            "thread_id": thread_id,
            "turn_id": run_id,
            "background": True,
            "multitask_strategy": run.multitask_strategy,
        }
        if given_options := merged.as_dict():
            # Journaled with the run, so a re-drive runs it the same way.
            params["run"] = given_options
        started = await deps.relay.call(caller, agent, auth.JSONRPC_CREATE, params)
        if not isinstance(started, dict) or not started.get("turn_id"):
            raise ApiError(409, f"thread {thread_id} has nothing to run: send input")
    turn = deps.engine.turns.get(run_id)
    if turn is None:  # erased between its start and here
        raise not_found(f"run {run_id}")
    return turn, body, start_after


def _locations(turn: TurnRecord, modes: Any) -> dict[str, str]:
    run = f"/threads/{turn.thread_id}/runs/{turn.turn_id}"
    return {"Content-Location": run, "Location": f"{run}/stream"}


async def create(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    turn, body, _ = await start_run(request, caller, deps)
    response = json_response(shapes.run(turn, field(body, "metadata", dict, {})))
    response.headers["Content-Location"] = _locations(turn, None)["Content-Location"]
    return response


async def stream(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    kind = stream_kind(request, deps)  # refused before a run starts
    turn, body, after = await start_run(request, caller, deps)
    return await _stream(
        request,
        caller,
        deps,
        kind,
        turn,
        modes_of(body.get("stream_mode")),
        after=after,
        fresh=True,
        cancel_on_disconnect=body.get("on_disconnect") == "cancel",
    )


async def join_stream(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    require(caller, WATCH_RIGHT)
    turn = run_or_404(deps, caller, _thread_path(request), request.match_info["run_id"])
    raw = request.headers.get("Last-Event-ID") or "0"
    try:
        position = lim.check_seq("Last-Event-ID", max(int(raw), 0))
    except (ValueError, InvalidArgument):
        raise ApiError(422, f"Last-Event-ID must be a whole number from 0 to {2**63 - 1}") from None
    # A live stream's ids name the attempt too (stream.py live_id); a settled one's
    # are bare seqs, whose attempt is not needed: nothing settled is taken back.
    after, after_attempt = position_of(position)
    # langgraph-sdk sends `stream_mode=` (empty) when its caller gives none: none.
    given = [mode for mode in request.query.getall("stream_mode", []) if mode]
    try:
        modes = modes_of(given or None)
    except ValueError as exc:
        raise ApiError(422, str(exc)) from None
    cancel = request.query.get("cancel_on_disconnect", "").lower() in ("true", "1")
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
) -> web.StreamResponse:
    """`after`: the seq the client has (or the run's events begin after), and
    `after_attempt` the attempt that wrote it (None: unknown); `fresh`: a new stream,
    which starts with the run's metadata."""
    translator = Translator(turn.turn_id, modes, context=_context(request, turn, caller))
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
    with quota:
        response, outcome = await deps.pump.serve(
            request,
            caller,
            parts,
            _RunFraming(turn.turn_id),
            name=f"LangGraph stream of run {turn.turn_id}",
            after=after,
            preamble=sse("metadata", {"run_id": turn.turn_id, "attempt": 1}) if fresh else None,
            headers=_locations(turn, modes),
        )
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
    turn, _, after = await start_run(request, caller, deps)
    response = json_response(await _outcome(deps, turn, after))
    response.headers.update(_locations(turn, None))
    return response


async def join(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, WATCH_RIGHT)
    turn = run_or_404(deps, caller, _thread_path(request), request.match_info["run_id"])
    return json_response(await _outcome(deps, turn))


async def get(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    turn = run_or_404(deps, caller, _thread_path(request), request.match_info["run_id"])
    return json_response(shapes.run(turn))


async def list_(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    thread_id = thread_id_of(request)
    await thread_or_404(deps, caller, thread_id)
    limit, offset = limit_offset(request.query)
    status = request.query.get("status")
    turns = await deps.engine.threads.turns(
        thread_id, limit=1000 if status else limit, offset=0 if status else offset
    )
    runs = [shapes.run(t) for t in turns]
    if status:
        runs = [r for r in runs if r["status"] == status][offset : offset + limit]
    return json_response(runs)


async def delete(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """A finished run's turn, events and boundaries (409 while it may still run)."""
    turn = run_or_404(deps, caller, _thread_path(request), request.match_info["run_id"])
    with web_auth.acting_as(caller):
        await deps.operations.turns.delete(turn.turn_id, HttpContext(request))
    return web.Response(status=204)


async def cancel(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    turn = run_or_404(deps, caller, _thread_path(request), request.match_info["run_id"])
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
