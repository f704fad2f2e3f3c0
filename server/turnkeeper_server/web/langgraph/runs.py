"""Runs: a run is a turn, and its id is the turn id everywhere (TurnStatus, the
console, the CLI, NATS). Here the routes: create, stream, wait and join a run,
read, list, cancel and delete it, and create or cancel many at once. How a run
starts is run_start.py (the one path every run takes), a run started later is
later_runs.py; a run's parts are stream.py's translation of its turn's journal, live
or settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Final

from aiohttp import web
from turnkeeper.v1 import turns_pb2

from turnkeeper_server import limits as lim
from turnkeeper_server.engine.watch import Rewound
from turnkeeper_server.errors import InvalidArgument, NotFound, WrongState
from turnkeeper_server.journal.crons import CronRecord
from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.records import ENDED, EventRecord, TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import (
    assistants,
    end_users,
    later_runs,
    run_start,
    shapes,
    webhooks,
)
from turnkeeper_server.web.langgraph.api import (
    CANCEL_RIGHT,
    READ,
    Deps,
    body_of,
    json_response,
    limit_offset,
    list_body_of,
    require,
    run_or_404,
    sees_owned,
    sees_run,
    thread_id_of,
    thread_or_404,
)
from turnkeeper_server.web.langgraph.errors import ApiError
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
# How often runs.wait sends a keep-alive newline while its run goes on (LangGraph's
# server: "\n" every 5 s; leading whitespace is ignored by JSON parsers).
WAIT_KEEPALIVE_SECONDS = 5.0
# How often a stream that cancels its run on disconnect looks at its connection.
DISCONNECT_POLL_SECONDS = 0.1
WATCH_RIGHT: Final = "/turnkeeper.v1.TurnService/WatchTurn"
# A stream's choice of how tokens go out, over the service's (--langgraph-stream).
STREAM_HEADER: Final = "X-Turnkeeper-Stream"


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


async def create(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    if (await body_of(request)).get("after_seconds") not in (None, 0):
        return json_response(
            later_runs.later_shape(await later_runs.start_later(request, caller, deps))
        )
    started = await run_start.start_run(request, caller, deps)
    # As LangGraph's server answers a create: the run, pending (its worker has not
    # picked it up yet; here the turn may already run).
    response = json_response(shapes.run(started.turn, started.record, status="pending"))
    response.headers["Content-Location"] = _locations(started.turn)["Content-Location"]
    return response


# The most runs one `runs.create_batch` starts.
MAX_BATCH: Final = 1000


async def create_batch(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    """Thread-less runs started together (`runs.create_batch`), each as POST /runs
    starts one (`after_seconds`: later); every run's body checked, and its assistant
    found, before the first starts (decision 800)."""
    batch = await list_body_of(request)
    if not batch or len(batch) > MAX_BATCH:
        raise ApiError(422, f"send a list of 1 to {MAX_BATCH} runs")
    checked: list[later_runs.Later | dict[str, Any]] = []
    for i, body in enumerate(batch):
        try:
            checked.append(await _check_batched(request, caller, deps, body))
        except ApiError as exc:
            raise ApiError(exc.status, f"run {i}: {exc.detail}") from None
    answered = []
    for body, check in zip(batch, checked, strict=True):
        if isinstance(check, later_runs.Later):
            record = await later_runs.put_later(request, caller, deps, check)
            answered.append(later_runs.later_shape(record))
            continue
        started = await run_start.launch(
            deps, caller, body, None, check, origin=HttpContext(request)
        )
        answered.append(shapes.run(started.turn, started.record, status="pending"))
    return json_response(answered)


async def _check_batched(
    request: web.Request, caller: Caller | None, deps: Deps, body: Any
) -> later_runs.Later | dict[str, Any]:
    """A batched run checked as POST /runs would check it, before any starts: a run
    due later as such, else the auth handler's stamp for its start."""
    if not isinstance(body, dict):
        raise ApiError(422, "a run must be a JSON object")
    if body.get("thread_id") is not None:
        raise ApiError(
            422, "thread_id: a batch starts thread-less runs (send each to its thread's runs)"
        )
    await webhooks.check(deps, body.get("webhook"))
    if body.get("after_seconds") not in (None, 0):
        return await later_runs.check_later(request, caller, deps, body, None)
    run_start.refuse_not_yet(body)
    run_start.check_run_body(body)
    await assistants.for_run(deps, caller, body.get("assistant_id"), served=False)
    return await end_users.create_run(request, deps, None, body)


async def stream(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    kind = stream_kind(request, deps)  # refused before a run starts
    started = await run_start.start_run(request, caller, deps)
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


def last_event_id(request: web.Request, turn: TurnRecord) -> tuple[int, int | None]:
    """Where a joining client is, (seq, attempt of that event): its `Last-Event-ID`
    (stream.py `position_of`: a settled stream's bare seq has no attempt), or (0,
    None) (none: the whole run). An id that is not one of this stream's (not a whole
    number in range) is read as LangGraph's server reads an id it has no event for:
    nothing is replayed, the stream goes on from the run's newest event as `turn`
    had it, whose attempt is `turn`'s (every event then was written by it or
    before), so a live stream still sees a rewind made since (decision 650)."""
    raw = request.headers.get("Last-Event-ID", "").strip()
    if not raw:
        return 0, None
    try:
        return position_of(lim.check_seq("Last-Event-ID", max(int(raw), 0)))
    except (ValueError, InvalidArgument):
        return turn.last_seq, turn.attempts


async def join_stream(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    require(caller, WATCH_RIGHT)
    turn = await later_runs.started(
        deps, caller, run_start.thread_path(request), request.match_info["run_id"]
    )
    # A live stream's ids name the attempt too (stream.py live_id); a settled one's
    # are bare seqs, whose attempt is not needed: nothing settled is taken back.
    after, after_attempt = last_event_id(request, turn)
    # langgraph-sdk sends `stream_mode=` (empty) when its caller gives none: none,
    # and then the run's own modes, as LangGraph's server streams what the run does.
    given = [mode for mode in request.query.getall("stream_mode", []) if mode]
    record = await run_start.run_record(deps, turn)
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
    started = await run_start.start_run(request, caller, deps)
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
    turn = await later_runs.started(
        deps, caller, run_start.thread_path(request), request.match_info["run_id"]
    )
    return json_response(await _outcome(deps, turn))


async def get(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    thread_id, run_id = run_start.thread_path(request), request.match_info["run_id"]
    try:
        turn = run_or_404(deps, caller, thread_id, run_id)
    except ApiError as exc:
        if exc.status != 404:
            raise
        # A run started later, not started yet.
        return json_response(
            later_runs.later_shape(await later_runs.later_or_404(deps, caller, thread_id, run_id))
        )
    return json_response(shapes.run(turn, await run_start.run_record(deps, turn)))


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
        waiting = [
            later_runs.later_shape(r) for r in await deps.engine.crons.once_on_thread(thread_id)
        ]
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
    turn = run_or_404(deps, caller, run_start.thread_path(request), request.match_info["run_id"])
    with web_auth.acting_as(caller):
        await deps.operations.turns.delete(turn.turn_id, HttpContext(request))
    return web.Response(status=204)


async def cancel(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    turn = await _run_or_later(
        deps, caller, run_start.thread_path(request), request.match_info["run_id"]
    )
    if isinstance(turn, CronRecord):
        # A run started later, not started yet: it never will.
        require(caller, CANCEL_RIGHT)
        await deps.engine.crons.delete(turn.cron_id)
        return web.Response(status=204 if request.query.get("wait") else 202)
    action = _cancel_action(request)
    wait_for_end = request.query.get("wait", "").lower() in ("true", "1")
    with web_auth.acting_as(caller):
        auth.require_right(CANCEL_RIGHT)
        if turn.state not in ENDED:
            await _cancel_turn(request, deps, turn.turn_id, action, "runs.cancel")
    if wait_for_end:
        await _drain(deps.engine.turns.watch_settled(turn.turn_id, turn.last_seq))
        return web.Response(status=204)
    return web.Response(status=202)


async def _run_or_later(
    deps: Deps, caller: Caller | None, thread_id: str | None, run_id: str
) -> TurnRecord | CronRecord:
    """The run `run_id` names, started or due later (not started yet), if the caller
    sees it; else the run's 404."""
    if deps.engine.turns.get(run_id) is None:
        return await later_runs.later_or_404(deps, caller, thread_id, run_id)
    return run_or_404(deps, caller, thread_id, run_id)


def _cancel_action(request: web.Request) -> str:
    """A cancel's `action` query parameter: `interrupt` (the default) or `rollback`."""
    action = request.query.get("action", "interrupt")
    if action not in ("interrupt", "rollback"):
        raise ApiError(422, "action must be 'interrupt' or 'rollback'")
    return action


# `runs.cancel_many`'s statuses, as run statuses (shapes.run_status), and the most run
# ids one call names.
CANCEL_STATUSES: Final = {
    "pending": frozenset({"pending"}),
    "running": frozenset({"running"}),
    "all": frozenset({"pending", "running"}),
}
MAX_CANCEL_IDS: Final = 1000


async def cancel_many(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    """Runs cancelled at once (`runs.cancel_many`): those `run_ids` names on
    `thread_id`, or every run of a `status` (`pending`, `running` or `all`) the
    caller sees, each as `runs.cancel` cancels one; 404 when there is none (decision
    799)."""
    body = await body_of(request)
    unknown = sorted(set(body) - {"thread_id", "run_ids", "status"})
    if unknown:
        raise ApiError(
            422, f"unknown field(s) {', '.join(unknown)}: send thread_id and run_ids, or status"
        )
    action = _cancel_action(request)
    status = body.get("status")
    thread_id, run_ids = body.get("thread_id"), body.get("run_ids")
    if status is not None:
        status = status.lower() if isinstance(status, str) else None
        if status not in CANCEL_STATUSES:
            raise ApiError(422, "status must be 'pending', 'running' or 'all'")
        if thread_id is not None or run_ids is not None:
            raise ApiError(
                422,
                "a status cancels every run of that status: send it without thread_id and run_ids",
            )
    elif (
        not isinstance(thread_id, str)
        or not isinstance(run_ids, list)
        or not run_ids
        or len(run_ids) > MAX_CANCEL_IDS
        or not all(isinstance(r, str) for r in run_ids)
    ):
        raise ApiError(
            422,
            f"send a status, or a thread_id and run_ids (a list of 1 to {MAX_CANCEL_IDS} run ids)",
        )
    # Before anything is looked up: a token that may not cancel runs learns nothing.
    require(caller, CANCEL_RIGHT)
    value = {
        "thread_id": thread_id,
        "action": action,
        "metadata": {"run_ids": run_ids, "status": status},
    }
    filters = await end_users.authorize(request, deps, "threads", "update", value)
    if status is None:
        assert isinstance(thread_id, str) and isinstance(run_ids, list)
        live, later = await _named_runs(deps, caller, thread_id, run_ids)
    else:
        live, later = await _runs_of_status(deps, caller, CANCEL_STATUSES[status])
    if filters:
        # The handler's filter hides the runs of the threads it does not match.
        threads = [t.thread_id for t in live] + [r.thread_id for r in later]
        shown = await end_users.threads_shown(deps, filters, threads)
        live = [t for t in live if t.thread_id in shown]
        later = [r for r in later if r.thread_id in shown]
    if not live and not later:
        raise ApiError(404, "No runs found to cancel.")  # the reference's words
    for due in later:
        await deps.engine.crons.delete(due.cron_id)
    for turn in (t for t in live if t.state not in ENDED):
        with contextlib.suppress(WrongState, NotFound), web_auth.acting_as(caller):
            # (ended or erased meanwhile: nothing to stop)
            await _cancel_turn(request, deps, turn.turn_id, action, "runs.cancel_many")
    return web.Response(status=204)


async def _cancel_turn(
    request: web.Request, deps: Deps, turn_id: str, action: str, call: str
) -> None:
    """A run's turn cancelled through the operations (CancelTurn's right and audit,
    as whoever `web_auth.acting_as` says)."""
    await deps.operations.turns.cancel(
        turns_pb2.CancelTurnRequest(
            turn_id=turn_id,
            rollback=action == "rollback",
            reason=f"cancelled through the LangGraph API ({call})",
        ),
        HttpContext(request),
    )


async def _named_runs(
    deps: Deps, caller: Caller | None, thread_id: str, run_ids: list[str]
) -> tuple[list[TurnRecord], list[CronRecord]]:
    """The thread's runs among `run_ids` the caller sees: those started (over or not:
    one that is over is found, and left as it is), and those due later."""
    live: list[TurnRecord] = []
    later: list[CronRecord] = []
    for run_id in dict.fromkeys(run_ids):
        try:
            found = await _run_or_later(deps, caller, thread_id, run_id)
        except ApiError as exc:
            if exc.status != 404:
                raise
            continue
        if isinstance(found, CronRecord):
            later.append(found)
        else:
            live.append(found)
    return live, later


async def _runs_of_status(
    deps: Deps, caller: Caller | None, statuses: frozenset[str]
) -> tuple[list[TurnRecord], list[CronRecord]]:
    """Every run of these statuses the caller sees: those started (running, or queued
    to), and, for `pending`, those due later."""
    live: list[TurnRecord] = []
    for run_id in await deps.engine.threads.unfinished_runs():
        turn = deps.engine.turns.get(run_id)
        if (
            turn is not None
            and shapes.run_status(turn) in statuses
            and sees_run(deps, caller, turn)
        ):
            live.append(turn)
    later: list[CronRecord] = []
    if "pending" in statuses:
        later = [
            r
            for r in await deps.engine.crons.all_once()
            if caller is None or sees_owned(caller, r.owner)
        ]
    return live, later
