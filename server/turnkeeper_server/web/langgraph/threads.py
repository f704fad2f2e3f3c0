"""Threads: made with metadata (journal/threads.py), found and searched here; their
state read and written through the graph of the agent that runs them (the bridge's
``langgraph/*`` methods), deleted with the service's full erasure (DeleteThread)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web
from turnkeeper._thread_state import empty_thread_state
from turnkeeper.v1 import checkpoints_pb2

from turnkeeper_server import audit as audit_log
from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import end_users, rights, shapes
from turnkeeper_server.web.langgraph.api import (
    READ,
    THREADS_WRITE,
    Deps,
    body_of,
    field,
    json_response,
    limit_offset,
    require,
    sees,
    thread_access,
    thread_id_of,
    thread_or_404,
)
from turnkeeper_server.web.langgraph.custom_auth import matches
from turnkeeper_server.web.langgraph.errors import ApiError
from turnkeeper_server.web.langgraph.stream import Translator

DELETE_THREAD: Final = "/turnkeeper.v1.CheckpointService/DeleteThread"
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
            thread_access(deps, caller),
        )
    return web.Response(status=204)


# The options of `threads.search` as LangGraph's server takes them (the document at
# /openapi.json is made from these too).
STATUSES: Final = ("idle", "busy", "interrupted", "error")
SORT_BY: Final = ("thread_id", "status", "created_at", "updated_at", "state_updated_at")
SORT_ORDER: Final = ("asc", "desc")
SELECT: Final = (
    "thread_id",
    "created_at",
    "updated_at",
    "state_updated_at",
    "metadata",
    "config",
    "status",
    "values",
    "interrupts",
)
# Where an `extract` path may start, and how many one search may name.
EXTRACT_ROOTS: Final = ("values", "metadata", "config", "interrupts")
MAX_EXTRACT: Final = 10
PRUNE_STRATEGIES: Final = ("delete", "keep_latest")
# The threads one search or count reads (after the metadata filter and the owner):
# sorting, status and values are of each thread's newest run, so they are applied
# here, over at most this many.
MAX_SCAN: Final = 100_000
_ALIAS: Final = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PATH_SPLIT: Final = re.compile(r"\.|\[")


def _choice(body: dict[str, Any], name: str, allowed: tuple[str, ...]) -> str | None:
    value = body.get(name)
    if value is None:
        return None
    if value not in allowed:
        raise ApiError(422, f"{name} must be one of {', '.join(allowed)}, not {value!r}")
    return str(value)


def _select(body: dict[str, Any]) -> list[str] | None:
    value = body.get("select")
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(422, "select must be a list of field names")
    invalid = [v for v in value if v not in SELECT]
    if invalid:
        raise ApiError(422, f"select: unknown fields {invalid}; the fields: {', '.join(SELECT)}")
    return value


def _extract(body: dict[str, Any]) -> dict[str, str] | None:
    value = body.get("extract")
    if value is None or value == {}:
        return None
    if not isinstance(value, dict) or len(value) > MAX_EXTRACT:
        raise ApiError(422, f"extract must be an object of at most {MAX_EXTRACT} alias: path")
    for alias, path in value.items():
        if not _ALIAS.match(alias) or alias in SELECT:
            raise ApiError(
                422, f"extract: {alias!r} must be an identifier and not a thread field's name"
            )
        if not isinstance(path, str) or path.split(".")[0].split("[")[0] not in EXTRACT_ROOTS:
            raise ApiError(
                422, f"extract: the path of {alias!r} must start with {', '.join(EXTRACT_ROOTS)}"
            )
    return value


def extract_path(thread: dict[str, Any], path: str) -> Any:
    """The value at `path` (`values.messages[-1].content`) in a thread; None when it
    does not resolve."""
    parts = _PATH_SPLIT.split(path)
    current: Any = thread.get(parts[0])
    for part in parts[1:]:
        if current is None:
            return None
        if part.endswith("]"):
            try:
                index = int(part[:-1])
                current = current[index] if isinstance(current, list) else None
            except (ValueError, IndexError):
                return None
        elif part:
            current = current.get(part) if isinstance(current, dict) else None
    return current


def contains(value: Any, pattern: Any) -> bool:
    """JSON containment, as PostgreSQL's `@>` (LangGraph's filter on `values`): an
    object holds each key of the pattern with a value that contains it; a list holds
    an element containing each element of the pattern."""
    if isinstance(pattern, dict):
        return isinstance(value, dict) and all(
            k in value and contains(value[k], v) for k, v in pattern.items()
        )
    if isinstance(pattern, list):
        return isinstance(value, list) and all(
            any(contains(item, p) for item in value) for p in pattern
        )
    return bool(value == pattern and type(value) is type(pattern))


@dataclass
class _Listed:
    record: ThreadRecord
    newest: TurnRecord | None

    def key(self, sort_by: str) -> Any:
        if sort_by == "thread_id":
            return self.record.thread_id
        if sort_by == "created_at":
            return self.record.created_at
        if sort_by == "status":
            return shapes.thread_status(self.newest)
        if sort_by == "state_updated_at":
            return shapes.state_updated_at(self.record, self.newest)
        return shapes.thread_updated_at(self.record, self.newest)


async def _listed(
    request: web.Request, caller: Caller | None, deps: Deps, body: dict[str, Any], action: str
) -> tuple[list[_Listed], Any]:
    """The threads `caller` sees that match the body's metadata, ids, status and
    values (and a langgraph.json's filter), each with its newest run, in no order;
    and the values filter (applied by the caller of this, which reads values)."""
    require(caller, READ)
    metadata = field(body, "metadata", dict, {})
    values = field(body, "values", dict, {})
    ids = field(body, "ids", list)
    if ids is not None and (len(ids) > MAX_IDS or not all(isinstance(i, str) for i in ids)):
        raise ApiError(422, f"ids must be a list of at most {MAX_IDS} thread ids")
    status = _choice(body, "status", STATUSES)
    limit, offset = limit_offset(body) if action == "search" else (None, None)
    # A langgraph.json's auth narrows the search to what its filter lets through.
    filters = await end_users.authorize(
        request,
        deps,
        "threads",
        "search",
        {
            "metadata": metadata,
            "values": values or None,
            "status": status,
            "limit": limit,
            "offset": offset,
        },
    )
    narrowed, rest = end_users.narrowed(metadata, filters)
    if narrowed is None:
        return [], values
    # A panel's threads are its own (in SQL); an agent's are filtered below (it also
    # sees the threads its turns run on).
    owner = None
    if caller is not None and not auth.sees_every_thread(caller) and caller.role != auth.AGENT:
        owner = auth.identity(caller)
    records = await deps.engine.threads.search(
        metadata=narrowed, ids=ids or None, limit=MAX_SCAN + 1, offset=0, owner=owner
    )
    if len(records) > MAX_SCAN:
        # Never a list or a count of some of them as if it were all.
        raise ApiError(
            422,
            f"more than {MAX_SCAN} threads match: narrow the {action} by metadata or ids",
        )
    out = []
    for record in records:
        if rest is not None and not matches(record.metadata, rest):
            continue
        if not sees(deps, caller, record):
            continue
        listed = _Listed(record, await newest_turn(deps, record.thread_id))
        if status and shapes.thread_status(listed.newest) != status:
            continue
        out.append(listed)
    return out, values


def _with_values(deps: Deps, listed: list[_Listed], values: Any) -> list[_Listed]:
    if not values:
        return listed
    return [t for t in listed if contains(newest_state(deps, t.newest)[0], values)]


async def search(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """Threads that match, sorted (`updated_at`, newest first, unless `sort_by` and
    `sort_order` say otherwise), a page of them, with the fields `select` names and
    the values `extract` names."""
    body = await body_of(request)
    limit, offset = limit_offset(body)
    sort_by = _choice(body, "sort_by", SORT_BY) or "updated_at"
    descending = (_choice(body, "sort_order", SORT_ORDER) or "desc") == "desc"
    select = _select(body)
    extract = _extract(body)
    listed, values = await _listed(request, caller, deps, body, "search")
    listed = _with_values(deps, listed, values)
    # Ties in the order of their ids, whichever the direction.
    listed.sort(key=lambda t: t.record.thread_id)
    listed.sort(key=lambda t: t.key(sort_by), reverse=descending)
    page = []
    for item in listed[offset : offset + limit]:
        values_of, interrupts = newest_state(deps, item.newest)
        thread = shapes.thread(item.record, item.newest, values_of, interrupts)
        shown = {k: v for k, v in thread.items() if k in select} if select else thread
        if extract:
            shown["extracted"] = {a: extract_path(thread, p) for a, p in extract.items()}
        page.append(shown)
    return json_response(page)


async def count(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """How many threads match `metadata`, `values` and `status` (every one, not a
    page)."""
    body = await body_of(request)
    listed, values = await _listed(request, caller, deps, body, "count")
    return json_response(len(_with_values(deps, listed, values)))


async def prune(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """Erase the threads named, as `DELETE /threads/{id}` erases one (their runs,
    events and checkpoints; a live run cancelled), each audited; a thread the
    caller does not see, or that is not, is skipped: `pruned_count` says how many
    were erased. `keep_latest` is refused (no checkpoint is ever dropped alone)."""
    body = await body_of(request)
    thread_ids = body.get("thread_ids")
    if not isinstance(thread_ids, list) or not all(isinstance(t, str) for t in thread_ids):
        raise ApiError(422, "thread_ids must be a list of thread ids")
    if len(thread_ids) > MAX_IDS:
        raise ApiError(422, f"thread_ids: at most {MAX_IDS} threads per prune")
    strategy = _choice(body, "strategy", PRUNE_STRATEGIES) or "delete"
    for thread_id in thread_ids:
        try:
            lim.check_id("thread_id", thread_id)
        except InvalidArgument as exc:
            raise ApiError(422, str(exc)) from None
    # Erasure is DeleteThread's right, one thread or many (decision 298); a refusal
    # is audited under the caller, each erasure by the operation that does it.
    needed = rights.Needed(audit_log.DELETE_THREAD, (DELETE_THREAD,))
    await rights.refuse_unless(deps, caller, needed, "prune " + " ".join(thread_ids)[:200])
    if strategy == "keep_latest":
        raise ApiError(
            422,
            "strategy keep_latest is not supported by turnkeeper: a thread's checkpoints "
            "are its runs' record; prune with strategy delete, or delete the thread",
        )
    # A langgraph.json's auth: its `threads.delete` handler is asked, once, for all.
    filters = await end_users.authorize(
        request, deps, "threads", "delete", {"thread_ids": list(thread_ids)}
    )
    # Every thread checked before any is erased: a refusal erases none.
    seen = []
    for thread_id in dict.fromkeys(thread_ids):
        record = await deps.engine.threads.get(thread_id)
        if record is None or not sees(deps, caller, record):
            continue
        if filters is not None and not matches(record.metadata, filters):
            raise ApiError(404, "at least one thread not found or not authorized")
        seen.append(thread_id)
    pruned = 0
    for thread_id in seen:
        with web_auth.acting_as(caller):
            await deps.operations.threads.erase(
                checkpoints_pb2.DeleteThreadRequest(thread_id=thread_id, cancel=True),
                HttpContext(request),
                thread_access(deps, caller),
            )
        pruned += 1
    return json_response({"pruned_count": pruned})


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
            thread_access(deps, caller),
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
    request: web.Request, caller: Caller | None, deps: Deps, method: str, params: dict[str, Any]
) -> Any:
    thread_id = thread_id_of(request)
    record = await thread_or_404(deps, caller, thread_id)
    agent = await thread_agent(deps, thread_id, record)
    if agent is None:
        return None
    return await deps.relay.call(caller, agent, method, {"thread_id": thread_id, **params})


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
    select = state_select(request.query.getall("select", []))
    if request.method == "POST":
        body = await body_of(request)
        checkpoint_id = _checkpoint_id(body)
        select = state_select(body.get("select"))
    if checkpoint_id:
        params["checkpoint_id"] = checkpoint_id
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
    async with rights.audited(deps, caller, audit_log.EDIT_STATE, thread_id_of(request)):
        with web_auth.acting_as(caller):
            auth.require_right(auth.EDIT_STATE)
        answer = await _graph_call(request, caller, deps, auth.JSONRPC_GRAPH_UPDATE_STATE, params)
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
