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
from turnkeeper._run_request import parse_run_request
from turnkeeper.v1 import turns_pb2

from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.records import ENDED, PARKED, TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import assistants, end_users, rights, shapes
from turnkeeper_server.web.langgraph.api import (
    READ,
    Deps,
    agent_id,
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
from turnkeeper_server.web.langgraph.stream import Translator, modes_of, sse
from turnkeeper_server.web.pump import Frame, Outcome

log = logging.getLogger(__name__)

# What LangGraph's runs take that turnkeeper does not do yet (docs/langgraph-api.md).
NOT_YET: Final = ("after_seconds", "webhook")
# How many of a thread's newest runs are looked through for the interrupted one.
PARKED_LOOKBACK: Final = 100
WATCH_RIGHT: Final = "/turnkeeper.v1.TurnService/WatchTurn"
CANCEL_RIGHT: Final = "/turnkeeper.v1.TurnService/CancelTurn"


def _thread_path(request: web.Request) -> str | None:
    return thread_id_of(request) if "thread_id" in request.match_info else None


async def start_run(
    request: web.Request, caller: Caller | None, deps: Deps
) -> tuple[TurnRecord, dict[str, Any], int]:
    """Validate the run, make its thread if asked, start (or resume) its turn.
    Returns the turn, the body, and the seq the run's own events come after (a
    resume goes on with a turn whose earlier events were the run before's)."""
    body = await body_of(request)
    agent = agent_id(body.get("assistant_id"))
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
    await assistants.known(deps, caller, agent)

    thread_id = _thread_path(request)
    # A langgraph.json's auth: the thread's filter, and what a thread this run makes
    # is stamped with (the run's metadata as its handler left it, LangGraph's rule).
    stamped = await end_users.create_run(request, deps, thread_id, body)
    # A run tags its thread with its graph, as LangGraph's server does (one write,
    # and none when the thread already says so).
    tagged = {"graph_id": agent, "assistant_id": agent}
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
        # Whose thread it is decides who answers its interrupt (rights.py).
        owner = record.owner
        if any(record.metadata.get(k) != v for k, v in tagged.items()):
            await deps.engine.threads.update_metadata(thread_id, tagged)

    # At most one turn of a thread is live; queued ones may be newer.
    recent = await deps.engine.threads.turns(thread_id, limit=PARKED_LOOKBACK)
    parked = [t for t in recent if t.state == PARKED]
    options = run.options.as_dict()
    # Answering the interrupt, editing the state, forking: rights of their own.
    needed = rights.of_run(options, run.resume_only)
    target = parked[0].turn_id if run.resume_only and parked else thread_id
    await rights.refuse_unless(deps, caller, needed, target, owner)
    # A run with no input and no command on an interrupted thread goes on with it
    # (useStream's submit(null)); with a resume it answers the interrupt.
    if run.resume_only or (parked and run.input is None and not run.command and not options):
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
        if options:
            # Journaled with the run, so a re-drive runs it the same way.
            params["run"] = options
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
    turn, body, after = await start_run(request, caller, deps)
    return await _stream(
        request,
        caller,
        deps,
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
        after = lim.check_seq("Last-Event-ID", max(int(raw), 0))
    except (ValueError, InvalidArgument):
        raise ApiError(422, f"Last-Event-ID must be a whole number from 0 to {2**63 - 1}") from None
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
        turn,
        modes,
        after=after,
        fresh=after == 0,
        cancel_on_disconnect=cancel,
    )


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
    turn: TurnRecord,
    modes: frozenset[str],
    *,
    after: int,
    fresh: bool,
    cancel_on_disconnect: bool,
) -> web.StreamResponse:
    """`after`: the seq the client has (or the run's events begin after); `fresh`:
    a new stream, which starts with the run's metadata."""
    with web_auth.acting_as(caller):
        auth.require_right(WATCH_RIGHT)
        # WatchTurn's quota: a LangGraph stream is a watch of the turn; and like one,
        # it ends when its caller's token is revoked (the pump, web/pump.py).
        quota = deps.pump.admit(request)
    with quota:
        response, outcome = await deps.pump.serve(
            request,
            caller,
            _settled_parts(deps, turn, Translator(turn.turn_id, modes), after),
            _RunFraming(turn.turn_id),
            name=f"LangGraph stream of run {turn.turn_id}",
            after=after,
            preamble=sse("metadata", {"run_id": turn.turn_id, "attempt": 1}) if fresh else None,
            headers=_locations(turn, modes),
        )
    if cancel_on_disconnect and outcome in (Outcome.GONE, Outcome.STALLED):
        await _cancel_quietly(deps, caller, turn.turn_id, "the streaming client went away")
    return response


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
