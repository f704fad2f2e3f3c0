"""Threads: made with metadata (journal/threads.py), found and searched here; their
state read and written through the graph of the agent that runs them (the bridge's
``langgraph/*`` methods), deleted with the service's full erasure (DeleteThread)."""

from __future__ import annotations

import uuid
from typing import Any, Final

from aiohttp import web
from turnkeeper._thread_state import empty_thread_state
from turnkeeper.v1 import checkpoints_pb2

from turnkeeper_server import audit as audit_log
from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import end_users, rights, shapes
from turnkeeper_server.web.langgraph.api import (
    DELETE_THREAD,
    READ,
    THREADS_WRITE,
    Deps,
    body_of,
    field,
    json_response,
    limit_offset,
    require,
    sees,
    thread_id_of,
    thread_or_404,
)
from turnkeeper_server.web.langgraph.errors import ApiError
from turnkeeper_server.web.langgraph.stream import Translator

COPY_THREAD: Final = "/turnkeeper.v1.CheckpointService/CopyThread"
# Thread ids one search may name.
MAX_IDS: Final = 1000
# How far back a thread's newest state is looked for in its newest run's events.
_TAIL: Final = 64


async def newest_turn(deps: Deps, thread_id: str) -> TurnRecord | None:
    turns = await deps.engine.threads.turns(thread_id, limit=1)
    return turns[0] if turns else None


def newest_state(deps: Deps, turn: TurnRecord | None) -> tuple[Any, dict[str, Any]]:
    """(values, interrupts by id) from the tail of the thread's newest run."""
    if turn is None:
        return {}, {}
    translator = Translator(turn.turn_id, frozenset({"values"}))
    for event in deps.engine.turns.events(turn.turn_id, max(turn.last_seq - _TAIL, 0), _TAIL):
        translator.parts(event)
    interrupts = (
        {str(i["id"]): [i] for i in translator.interrupts} if turn.state == "PARKED" else {}
    )
    return (translator.values if translator.values is not None else {}), interrupts


async def thread_json(deps: Deps, record: Any) -> dict[str, Any]:
    turn = await newest_turn(deps, record.thread_id)
    values, interrupts = newest_state(deps, turn)
    return shapes.thread(record, turn, values, interrupts)


async def create(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, THREADS_WRITE)
    body = await body_of(request)
    thread_id = field(body, "thread_id", str) or str(uuid.uuid4())
    try:
        lim.check_id("thread_id", thread_id)
    except InvalidArgument as exc:
        raise ApiError(422, str(exc)) from None
    metadata = dict(field(body, "metadata", dict, {}))
    graph_id = field(body, "graph_id", str)
    if graph_id:
        metadata.setdefault("graph_id", graph_id)
    if_exists = field(body, "if_exists", str, "raise")
    if if_exists not in ("raise", "do_nothing"):
        raise ApiError(422, "if_exists must be 'raise' or 'do_nothing'")
    if body.get("supersteps"):
        raise ApiError(422, "supersteps is not supported by turnkeeper yet (docs/langgraph-api.md)")
    _no_ttl(body)
    # A langgraph.json's auth may stamp the metadata (an owner) or refuse.
    value = {"thread_id": thread_id, "metadata": metadata, "if_exists": if_exists}
    await end_users.create_thread(request, deps, value)
    metadata = dict(value.get("metadata") or {})
    record = await deps.engine.threads.create(
        thread_id, metadata, if_exists=if_exists, owner=auth.identity(caller)
    )
    if not sees(deps, caller, record):
        # if_exists=do_nothing on another caller's thread: it is not given away.
        raise ApiError(409, f"thread {thread_id} exists")
    return json_response(await thread_json(deps, record))


async def get(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    include = [v for item in request.query.getall("include", []) for v in item.split(",") if v]
    if include:
        raise ApiError(
            422,
            f"include: {', '.join(include)}: turnkeeper's threads have no ttl (nothing "
            "else may be included); a thread is kept until it is deleted or pruned",
        )
    record = await thread_or_404(deps, caller, thread_id_of(request))
    return json_response(await thread_json(deps, record))


async def update(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, THREADS_WRITE)
    thread_id = thread_id_of(request)
    await thread_or_404(deps, caller, thread_id)
    body = await body_of(request)
    metadata = field(body, "metadata", dict, {})
    _no_ttl(body)
    # A langgraph.json's auth: its filter, and the metadata as its handler left it.
    metadata = await end_users.update_thread(request, deps, thread_id, metadata)
    record = await deps.engine.threads.update_metadata(thread_id, metadata)
    if record is None:
        raise ApiError(404, f"thread {thread_id} not found")
    if "return=minimal" in request.headers.get("Prefer", "").replace(" ", "").split(","):
        # The SDK's return_minimal: no body, as LangGraph's server answers it.
        return web.Response(status=204)
    return json_response(await thread_json(deps, record))


def _no_ttl(body: dict[str, Any]) -> None:
    if body.get("ttl") is not None:
        raise ApiError(
            422,
            "ttl is not supported by turnkeeper: a thread is kept until it is deleted "
            "or pruned (threads.prune)",
        )


async def delete(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, DELETE_THREAD)
    thread_id = thread_id_of(request)
    await thread_or_404(deps, caller, thread_id)
    # LangGraph's server deletes a thread with its runs: a live run is cancelled in
    # the same transaction as the erasure.
    with web_auth.acting_as(caller):
        await deps.operations.threads.erase(
            checkpoints_pb2.DeleteThreadRequest(thread_id=thread_id, cancel=True),
            HttpContext(request),
        )
    return web.Response(status=204)


async def copy(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, COPY_THREAD)
    source = thread_id_of(request)
    record = await thread_or_404(deps, caller, source)
    target = str(uuid.uuid4())
    # A langgraph.json's auth: the copy is a create too (refusable; it keeps the
    # source's metadata, as on LangGraph's server). The source's read is the route's.
    await end_users.authorize(request, deps, "threads", "create", {"thread_id": target})
    with web_auth.acting_as(caller):
        await deps.operations.threads.copy(
            checkpoints_pb2.CopyThreadRequest(source_thread_id=source, target_thread_id=target),
            HttpContext(request),
        )
    copied = await deps.engine.threads.create(
        target, dict(record.metadata), if_exists="raise", owner=auth.identity(caller)
    )
    return json_response(await thread_json(deps, copied))


async def thread_agent(deps: Deps, thread_id: str, record: Any) -> str | None:
    """The agent whose graph holds the thread's state: its newest run's, else the
    graph it was made for."""
    turn = await newest_turn(deps, thread_id)
    if turn is not None:
        return turn.agent
    for key in ("graph_id", "assistant_id"):
        value = record.metadata.get(key)
        if isinstance(value, str) and value:
            return value
    return None


async def _graph_call(
    request: web.Request,
    caller: Caller | None,
    deps: Deps,
    method: str,
    params: dict[str, Any],
    record: Any = None,
    *,
    granted: bool = False,
) -> Any:
    thread_id = thread_id_of(request)
    if record is None:
        record = await thread_or_404(deps, caller, thread_id)
    agent = await thread_agent(deps, thread_id, record)
    if agent is None:
        return None
    return await deps.relay.call(
        caller, agent, method, {"thread_id": thread_id, **params}, granted=granted
    )


def _checkpoint_id(body: dict[str, Any]) -> str | None:
    checkpoint = body.get("checkpoint")
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("checkpoint_id"), str):
        return str(checkpoint["checkpoint_id"])
    value = body.get("checkpoint_id")
    return value if isinstance(value, str) and value else None


async def state(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    params: dict[str, Any] = {}
    checkpoint_id = request.match_info.get("checkpoint_id")
    subgraphs: Any = request.query.get("subgraphs", "false").lower() == "true"
    select = state_select(request.query.getall("select", []))
    if request.method == "POST":
        body = await body_of(request)
        checkpoint_id = _checkpoint_id(body)
        subgraphs = body.get("subgraphs") is True
        select = state_select(body.get("select"))
    if checkpoint_id:
        params["checkpoint_id"] = checkpoint_id
    if subgraphs:
        # A subgraph task's own state in its `state` (LangGraph's get_state).
        params["subgraphs"] = True
    answer = await _graph_call(request, caller, deps, auth.JSONRPC_GRAPH_STATE, params)
    found = answer if answer is not None else empty_thread_state(thread_id_of(request))
    return json_response(selected_state(found, select))


async def update_state(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    require(caller, READ)
    body = await body_of(request)
    params: dict[str, Any] = {"values": body.get("values")}
    as_node = field(body, "as_node", str)
    if as_node:
        params["as_node"] = as_node
    checkpoint_id = _checkpoint_id(body)
    if checkpoint_id:
        params["checkpoint_id"] = checkpoint_id
    # Audited here, under the caller: the checkpoint is written by the agent's graph.
    record = await thread_or_404(deps, caller, thread_id_of(request))
    async with rights.audited(deps, caller, audit_log.EDIT_STATE, thread_id_of(request)):
        # Operators' by role; the thread owner's where the deployment allows it, and
        # then the bridge is told the service granted this one request.
        rights.require(deps, caller, auth.EDIT_STATE, record.owner, "edit the thread's state")
        answer = await _graph_call(
            request,
            caller,
            deps,
            auth.JSONRPC_GRAPH_UPDATE_STATE,
            params,
            record,
            granted=not rights.by_role(caller, auth.EDIT_STATE),
        )
    if answer is None:
        raise ApiError(
            409, "the thread has no graph yet: run it once, or create it with a graph_id"
        )
    await deps.engine.threads.touch(thread_id_of(request))
    return json_response(answer)


async def history(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    body: dict[str, Any] = (
        dict(request.query) if request.method == "GET" else await body_of(request)
    )
    limit, _ = limit_offset(body)
    params: dict[str, Any] = {"limit": limit}
    before = body.get("before")
    if isinstance(before, dict):
        before = before.get("checkpoint_id")
    if isinstance(before, str) and before:
        params["before"] = before
    if isinstance(body.get("metadata"), dict):
        params["metadata"] = body["metadata"]
    checkpoint_id = _checkpoint_id(body)
    if checkpoint_id:
        params["checkpoint_id"] = checkpoint_id
    select = state_select(body.get("select"))
    answer = await _graph_call(request, caller, deps, auth.JSONRPC_GRAPH_HISTORY, params)
    return json_response([selected_state(state, select) for state in answer or []])


# A thread state's fields `select` may name (or `values.<key>`, one key of its values).
STATE_FIELDS: Final = (
    "values",
    "next",
    "tasks",
    "checkpoint",
    "metadata",
    "created_at",
    "parent_checkpoint",
    "interrupts",
)


def state_select(value: Any) -> list[str] | None:
    """The `select` of a state or history read, checked (None or []: everything)."""
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(422, "select must be a list of field names")
    invalid = [
        v for v in value if v not in STATE_FIELDS and not (v.startswith("values.") and v[7:])
    ]
    if invalid:
        raise ApiError(
            422,
            f"select: unknown fields {invalid}; the fields: {', '.join(STATE_FIELDS)}, "
            "or values.<key>",
        )
    return value


def selected_state(state: Any, select: list[str] | None) -> Any:
    """The fields of a thread state `select` names; `values.<key>` keeps that key of
    the values (an absent key stays absent)."""
    if not select or not isinstance(state, dict):
        return state
    out: dict[str, Any] = {}
    for name in select:
        if name.startswith("values."):
            values = state.get("values")
            kept = out.setdefault("values", {})
            if isinstance(values, dict) and name[7:] in values and isinstance(kept, dict):
                kept[name[7:]] = values[name[7:]]
        elif name in state:
            out[name] = state[name]
    return out
