"""Starting a LangGraph API run: the one path every run takes (POST /runs and
/threads/{id}/runs, their stream and wait, what a cron's tick or a run started later
fires): the body checked, the assistant's config and context merged under the run's,
the thread made or checked, the turn journaled and handed to a replica in one
message (handoff_start.py, decision 370; through the agent only for input null with
nothing to resume), and the run's record stored beside its turn (journal/runs.py).

Every run is a new turn, a resume too, as LangGraph's server makes every run a new
run (decision 294): a run on a thread whose turn waits at an interrupt ends that
turn (DONE, answered: its run stopped at the interrupt, LangGraph's `success`) and
goes on from the thread's checkpoint with its own input or ``Command``. So input
null re-runs the interrupted node (which asks again), new input starts over, and a
``Command`` with resume, update and goto answers the interrupt.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from turnkeeper._run_request import (
    RunRequest,
    default_assistant_id,
    merge_assistant,
    parse_run_request,
)

from turnkeeper_server.journal.assistants import AssistantRecord
from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.journal.start import ThreadMadeMeanwhile
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.operations.origin import Origin
from turnkeeper_server.records import PARKED, QUEUED, TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import assistants, end_users, handoff_start, rights, webhooks
from turnkeeper_server.web.langgraph.api import Deps, body_of, field, sees, thread_id_of
from turnkeeper_server.web.langgraph.errors import ApiError, not_found
from turnkeeper_server.web.langgraph.stream import modes_of

# What LangGraph's runs take that turnkeeper does not do yet (docs/langgraph-api.md).
NOT_YET: Final[tuple[str, ...]] = ()
# How many of a thread's newest runs are looked through for the interrupted one.
PARKED_LOOKBACK: Final = 100
# The kwargs a run records, as LangGraph's server records them (its RunKwargs).
KWARGS: Final = ("input", "command", "config", "context")
# Starts of a run whose thread a racing request made meanwhile, at most (decision 580).
_MAX_TRIES: Final = 3


def thread_path(request: web.Request) -> str | None:
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
    thread_id = thread_path(request)
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


async def thread_for_run(
    deps: Deps,
    caller: Caller | None,
    thread_id: str | None,
    metadata: dict[str, Any],
    if_not_exists: str | None,
    new_thread_id: str | None = None,
    *,
    defer: bool = False,
) -> tuple[ThreadRecord, bool]:
    """The thread a run goes on, and whether this call's insert made it (False when
    a racing request's did: decision 570): a new one (with `new_thread_id`, or a
    fresh id) for a run without one, or the one named, made with `metadata` when it
    is not and `if_not_exists` says "create" (404 else), and 404 when the caller may
    not see it. With `defer`, a thread to make is not written here: True then says
    the caller makes it in its turn's commit (decision 580)."""
    if thread_id is None:
        thread_id = new_thread_id or str(uuid.uuid4())
    elif (found := await deps.engine.threads.get(thread_id)) is not None:
        # As thread_or_404 says, on the record just read (decision 571: no second).
        if not sees(deps, caller, found):
            raise not_found(f"thread {thread_id}")
        return found, False
    elif if_not_exists != "create":
        raise not_found(f"thread {thread_id}")
    if defer:
        now = time.time()
        return ThreadRecord(thread_id, metadata, now, now, auth.identity(caller)), True
    return await deps.engine.threads.ensure_made(thread_id, metadata, auth.identity(caller))


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
        found = await run_record(deps, existing)
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
    run_id = run_id or str(uuid.uuid4())
    params: dict[str, Any] = {
        "input": run.input,
        "turn_id": run_id,
        "background": True,
        "multitask_strategy": run.multitask_strategy,
    }
    if given_options := merged.as_dict():
        # Journaled with the run, so a re-drive runs it the same way.
        params["run"] = given_options

    def record_for(thread: ThreadRecord) -> RunRecord:
        assert run_id is not None
        return _run_record(body, assistant, thread, stamped, modes, run_id, run)

    for tries in range(1, _MAX_TRIES + 1):
        # A thread the run makes is made in its turn's commit (decision 580), unless
        # the agent starts the turn: then first, as the agent needs it.
        thread, made = await thread_for_run(
            deps,
            caller,
            thread_id,
            {**tagged, **stamped},
            run.if_not_exists,
            new_thread_id,
            defer=not relayed,
        )
        try:
            thread, stored = await _start_turn(
                deps,
                caller,
                origin,
                run,
                agent,
                thread,
                made,
                tagged,
                params,
                record_for,
                relayed=relayed,
            )
        except ThreadMadeMeanwhile:
            # A racing request made the thread since it was looked for: nothing
            # was written; start again on the thread it made.
            if tries == _MAX_TRIES:
                raise
            continue
        break
    thread_id = thread.thread_id
    if relayed:
        # The agent started the turn: its record follows in a commit of its own.
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


async def _start_turn(
    deps: Deps,
    caller: Caller | None,
    origin: Origin,
    run: RunRequest,
    agent: str,
    thread: ThreadRecord,
    made: bool,
    tagged: dict[str, Any],
    params: dict[str, Any],
    record_for: Callable[[ThreadRecord], RunRecord],
    *,
    relayed: bool,
) -> tuple[ThreadRecord, RunRecord]:
    """The run's turn started on `thread` (`made`: by this start, in the turn's own
    commit unless the agent starts it), or ThreadMadeMeanwhile; the thread as the
    run tagged it, and the run's record, `record_for(thread)`, which a turn the
    service journals itself is written with (decision 700)."""
    options = run.options.as_dict()
    thread_id = thread.thread_id
    run_id = params["turn_id"]
    # Whose thread it is decides who answers its interrupt (rights.py).
    owner = thread.owner
    if not made and any(thread.metadata.get(k) != v for k, v in tagged.items()):
        thread = await deps.engine.threads.update_metadata(thread_id, tagged) or thread

    # At most one turn of a thread is live; queued ones may be newer. A thread this
    # start's own insert makes had no turn then (decision 570): no read; a turn
    # another request puts on it from now on is as if it came after the read.
    recent = [] if made else await deps.engine.threads.turns(thread_id, limit=PARKED_LOOKBACK)
    parked = next((t for t in recent if t.state == PARKED), None)
    # Answering the interrupt, editing the state, forking: rights of their own.
    needed = rights.of_run(options)
    answers = "resume" in (options.get("command") or {})
    target = parked.turn_id if parked is not None and answers else thread_id
    await rights.refuse_unless(deps, caller, needed, target, owner)
    if parked is not None:
        # LangGraph's server: the run that stopped at the interrupt is over; this
        # one goes on from the thread's checkpoint.
        await deps.engine.turns.close_parked(
            thread_id=thread_id, detail=f"answered by run {run_id}"
        )
    params = {**params, "thread_id": thread_id}
    record = record_for(thread)
    if relayed:
        # Only the graph says whether the thread has anything to continue: the agent
        # starts it (StartTurn audits it, naming the caller the agent acts for).
        started = await deps.relay.call(caller, agent, auth.JSONRPC_CREATE, params)
        if not isinstance(started, dict) or not started.get("turn_id"):
            raise ApiError(409, f"thread {thread_id} has nothing to run: send input")
        return thread, record
    # Journaled here and handed to a replica in one message (decision 370), with
    # the thread it makes in the same commit.
    await handoff_start.start(
        deps,
        caller,
        origin,
        agent=agent,
        thread_id=thread_id,
        run_id=run_id,
        strategy=run.multitask_strategy,
        journaled_input=handoff_start.journaled(run.input, params.get("run") or {}),
        new_thread=thread.metadata if made else None,
        run=record,
    )
    return thread, record


def _run_record(
    body: dict[str, Any],
    assistant: AssistantRecord,
    thread: ThreadRecord,
    stamped: dict[str, Any],
    modes: frozenset[str],
    run_id: str,
    run: RunRequest,
) -> RunRecord:
    """The run's record as LangGraph's server keeps it: its merged metadata and the
    kwargs it was created with."""
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
    return RunRecord(run_id, metadata, _json_safe(kwargs), run.multitask_strategy)


def acts_as(caller: Caller | None) -> dict[str, Any]:
    """The token a run started later (a cron's, an after_seconds run) starts under:
    its maker's, looked up again by name when it fires (tokens.names)."""
    if caller is None:
        return {}
    return {"name": caller.name, "role": caller.role, "agent": caller.agent}


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


async def run_record(deps: Deps, turn: TurnRecord) -> RunRecord | None:
    return (await deps.engine.threads.runs([turn.turn_id])).get(turn.turn_id)
