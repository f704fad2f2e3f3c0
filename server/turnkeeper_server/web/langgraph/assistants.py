"""Assistants: stored configurations of the graphs replicas serve (config, context,
metadata, a name, a description), versioned, kept in the journal
(journal/assistants.py) on either backend, as LangGraph's server has them.

Each graph a replica announced has a default assistant, whose id is LangGraph's
uuid5 of the graph id; the graph's name keeps working as an assistant id (it names
that default one). An assistant of a graph with no live replica is still listed and
read; a run of it is answered as a run of that graph is (`for_run`). The graph and
its schemas are asked of a replica (`langgraph/describe`).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from typing import Any, Final

from aiohttp import web
from turnkeeper._run_request import BOTH_GIVEN, default_assistant_id
from turnkeeper.v1 import checkpoints_pb2, turns_pb2

from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument, NotFound, WrongState
from turnkeeper_server.journal.assistants import AssistantRecord
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext
from turnkeeper_server.web.langgraph import end_users, shapes
from turnkeeper_server.web.langgraph.api import (
    CANCEL_RIGHT,
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
    sees_run,
)
from turnkeeper_server.web.langgraph.custom_auth import matches
from turnkeeper_server.web.langgraph.errors import ApiError, not_found
from turnkeeper_server.web.relay import NotAnswered

IF_EXISTS: Final = ("raise", "do_nothing")
SORT_BY: Final = ("assistant_id", "created_at", "updated_at", "name", "graph_id")
SELECT: Final = (
    "assistant_id",
    "graph_id",
    "name",
    "description",
    "config",
    "context",
    "created_at",
    "updated_at",
    "metadata",
    "version",
)


async def graphs(deps: Deps) -> list[str]:
    """The graphs served now or announced once, each with its default assistant."""
    known = sorted(set(deps.directory.agents()) | set(deps.engine.turns.announced_agents()))
    await deps.engine.assistants.ensure_defaults(known)
    return known


def _sees(caller: Caller | None, record: AssistantRecord) -> bool:
    # An agent's token reads its own graph's assistants only.
    return caller is None or caller.role != auth.AGENT or caller.agent == record.graph_id


def _uuid_shaped(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


async def resolve(deps: Deps, caller: Caller | None, value: Any) -> AssistantRecord:
    """The assistant an id names: a stored one, or a graph's default by the graph's
    name. 404 for none, or one the caller may not see."""
    if not isinstance(value, str) or not value:
        raise ApiError(422, "assistant_id must be a non-empty string")
    try:
        lim.check_id("assistant_id", value)
    except InvalidArgument as exc:
        raise ApiError(422, str(exc)) from None
    if _uuid_shaped(value):
        record = await deps.engine.assistants.get(value)
    else:
        # A stored assistant's id is a UUID (created ones are refused otherwise, a
        # graph's default is uuid5 of its name): a name is looked up as a graph's
        # default, one read where it was two and the graphs' list (decision 701).
        record = await deps.engine.assistants.get(default_assistant_id(value))
        if record is not None and record.graph_id != value:
            record = None
    if record is None and value in await graphs(deps):
        record = await deps.engine.assistants.get(default_assistant_id(value))
    if record is None or not _sees(caller, record):
        raise not_found(f"assistant {value}")
    return record


def shape(record: AssistantRecord, *, version_only: bool = False) -> dict[str, Any]:
    """The assistant (or one of its versions) with LangGraph's server's keys, in its
    order."""
    common = {
        "graph_id": record.graph_id,
        "config": record.config,
        "context": record.context,
        "metadata": record.metadata,
    }
    created = shapes.iso(record.created_at)
    if version_only:
        return {
            "assistant_id": record.assistant_id,
            "version": record.version,
            **common,
            "created_at": created,
            "name": record.name,
            "description": record.description,
        }
    return {
        "assistant_id": record.assistant_id,
        **common,
        "name": record.name,
        "created_at": created,
        "updated_at": shapes.iso(record.updated_at),
        "version": record.version,
        "description": record.description,
    }


def _object(body: dict[str, Any], name: str) -> dict[str, Any] | None:
    value = field(body, name, dict)
    return None if value is None else dict(value)


def _mirrored(
    config: dict[str, Any] | None, context: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """LangGraph's server keeps an assistant's configurable and context one copy of
    each other: the one given is both; giving both is refused (400, its words)."""
    configurable = (config or {}).get("configurable")
    if configurable is not None and not isinstance(configurable, dict):
        raise ApiError(422, "config.configurable must be an object")
    if configurable and context:
        raise ApiError(400, BOTH_GIVEN)
    if configurable:
        return config, dict(configurable)
    if context:
        return {**(config or {}), "configurable": dict(context)}, context
    return config, context


async def _graph_or_404(deps: Deps, caller: Caller | None, graph_id: Any) -> str:
    if not isinstance(graph_id, str) or not graph_id:
        raise ApiError(422, "graph_id must be a non-empty string")
    known = await graphs(deps)
    if caller is not None and caller.role == auth.AGENT:
        known = [g for g in known if g == caller.agent]
    if graph_id not in known:
        raise ApiError(404, f"Graph '{graph_id}' not found. Expected one of: {known}")
    return graph_id


async def create(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, THREADS_WRITE)
    body = await body_of(request)
    graph_id = await _graph_or_404(deps, caller, body.get("graph_id"))
    assistant_id = field(body, "assistant_id", str) or str(uuid.uuid4())
    try:
        uuid.UUID(assistant_id)
    except ValueError:
        raise ApiError(422, "Invalid assistant ID: must be a UUID") from None
    if_exists = field(body, "if_exists", str, "raise")
    if if_exists not in IF_EXISTS:
        raise ApiError(422, "if_exists must be 'raise' or 'do_nothing'")
    config, context = _mirrored(_object(body, "config"), _object(body, "context"))
    value: dict[str, Any] = {
        "assistant_id": assistant_id,
        "graph_id": graph_id,
        "config": config or {},
        "context": context or {},
        "metadata": _object(body, "metadata") or {},
        "name": field(body, "name", str) or "Untitled",
    }
    # A langgraph.json's auth: its handler may stamp the metadata; an assistant of
    # that id its filter hides is a conflict, never handed back (LangGraph's rule).
    filters = await end_users.authorize(request, deps, "assistants", "create", value)
    existing = await deps.engine.assistants.get(assistant_id)
    if existing is not None and (
        not _sees(caller, existing) or (filters and not matches(existing.metadata, filters))
    ):
        raise ApiError(409, f"assistant {assistant_id} already exists")
    now = time.time()
    metadata = value.get("metadata")
    record = AssistantRecord(
        assistant_id=assistant_id,
        graph_id=graph_id,
        version=1,
        name=value["name"],
        description=field(body, "description", str),
        config=config or {},
        context=context or {},
        metadata=dict(metadata) if isinstance(metadata, dict) else {},
        created_at=now,
        updated_at=now,
    )
    made, _ = await deps.engine.assistants.create(record, if_exists=if_exists)
    return json_response(shape(made))


async def get(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, READ)
    return json_response(shape(await resolve(deps, caller, request.match_info["assistant_id"])))


async def update(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """A new version of the assistant, made its latest: what is given replaces the
    latest's (metadata merges, keys given replace)."""
    require(caller, THREADS_WRITE)
    record = await resolve(deps, caller, request.match_info["assistant_id"])
    body = await body_of(request)
    changes: dict[str, Any] = {}
    if body.get("graph_id") is not None:
        changes["graph_id"] = await _graph_or_404(deps, caller, body["graph_id"])
    config, context = _mirrored(_object(body, "config"), _object(body, "context"))
    if config:
        changes["config"] = config
    if context is not None:
        changes["context"] = context
    for name in ("name", "description"):
        if (text := field(body, name, str)) is not None:
            changes[name] = text
    value: dict[str, Any] = {
        "assistant_id": record.assistant_id,
        "graph_id": changes.get("graph_id"),
        "config": config or {},
        "context": context,
        "metadata": _object(body, "metadata") or {},
        "name": changes.get("name"),
    }
    filters = await end_users.authorize(request, deps, "assistants", "update", value)
    if filters and not matches(record.metadata, filters):
        raise not_found(f"assistant {record.assistant_id}")
    metadata = value.get("metadata")
    changes["metadata"] = dict(metadata) if isinstance(metadata, dict) else {}
    made = await deps.engine.assistants.update(record.assistant_id, changes)
    return json_response(shape(made))


async def delete(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """The assistant and its versions, as LangGraph's server deletes one: with
    `delete_threads=true` its threads first (each the caller may delete; the others
    are left), then its runs still running or queued are cancelled (a run stopped at
    an interrupt is over, and stays), then the assistant goes."""
    require(caller, THREADS_WRITE)
    record = await resolve(deps, caller, request.match_info["assistant_id"])
    live = []
    for run_id in await deps.engine.threads.unfinished_runs_of_assistant(record.assistant_id):
        turn = deps.engine.turns.get(run_id)
        if turn is not None and sees_run(deps, caller, turn):
            live.append(run_id)
    if live:
        # Deleting the assistant cancels them: a token that may not cancel a run
        # may not delete its assistant while one runs (403, nothing changed).
        require(caller, CANCEL_RIGHT)
    if request.query.get("delete_threads", "").lower() == "true":
        require(caller, DELETE_THREAD)
        await _delete_threads(request, caller, deps, record.assistant_id)
    reason = f"assistant {record.assistant_id} was deleted"
    for run_id in live:
        with contextlib.suppress(WrongState, NotFound), web_auth.acting_as(caller):
            # (ended meanwhile, or erased with its thread just now: nothing to stop)
            await deps.operations.turns.cancel(
                turns_pb2.CancelTurnRequest(turn_id=run_id, reason=reason),
                HttpContext(request),
            )
    if not await deps.engine.assistants.delete(record.assistant_id):
        raise not_found(f"assistant {record.assistant_id}")
    return web.Response(status=204)


async def _delete_threads(
    request: web.Request, caller: Caller | None, deps: Deps, assistant_id: str
) -> None:
    """Erase the threads last run with this assistant (their metadata says so), as
    `DELETE /threads/{id}` erases one; a thread the caller may not delete is kept."""
    named: list[ThreadRecord] = []  # all of them first: erasing shifts the pages
    while True:
        page = await deps.engine.threads.search(
            metadata={"assistant_id": assistant_id}, ids=None, limit=100, offset=len(named)
        )
        named += page
        if len(page) < 100:
            break
    for thread in named:
        if not sees(deps, caller, thread):
            continue
        try:
            filters = await end_users.authorize(
                request, deps, "threads", "delete", {"thread_id": thread.thread_id}
            )
        except ApiError:
            continue  # LangGraph's server: skipped, the caller lacks permission
        if filters and not matches(thread.metadata, filters):
            continue
        with web_auth.acting_as(caller):
            await deps.operations.threads.erase(
                checkpoints_pb2.DeleteThreadRequest(thread_id=thread.thread_id, cancel=True),
                HttpContext(request),
            )


async def versions(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """The assistant's versions, newest first; `metadata` filters, paged."""
    require(caller, READ)
    record = await resolve(deps, caller, request.match_info["assistant_id"])
    body = await body_of(request)
    wanted = _object(body, "metadata") or {}
    limit, offset = limit_offset(body)
    found = [
        v
        for v in await deps.engine.assistants.versions(record.assistant_id)
        if _contains(v.metadata, wanted)
    ]
    return json_response([shape(v, version_only=True) for v in found[offset : offset + limit]])


async def set_latest(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, THREADS_WRITE)
    record = await resolve(deps, caller, request.match_info["assistant_id"])
    body = await body_of(request)
    version = field(body, "version", int)
    if version is None:
        raise ApiError(422, "version must be a whole number")
    value = {"assistant_id": record.assistant_id, "version": version}
    filters = await end_users.authorize(request, deps, "assistants", "update", value)
    if filters and not matches(record.metadata, filters):
        raise not_found(f"assistant {record.assistant_id}")
    return json_response(
        shape(await deps.engine.assistants.set_latest(record.assistant_id, version))
    )


def _contains(superset: dict[str, Any], subset: dict[str, Any]) -> bool:
    """PostgreSQL's jsonb @>, as LangGraph's server filters metadata by it."""
    for key, value in subset.items():
        if key not in superset:
            return False
        if isinstance(value, dict) and isinstance(superset[key], dict):
            if not _contains(superset[key], value):
                return False
        elif superset[key] != value:
            return False
    return True


async def _matching(
    request: web.Request, caller: Caller | None, deps: Deps
) -> list[AssistantRecord]:
    """The assistants a search or a count asks for, unpaged, in its order."""
    require(caller, READ)
    body = await body_of(request)
    graph_id = field(body, "graph_id", str)
    if graph_id is not None:
        await _graph_or_404(deps, caller, graph_id)
    else:
        await graphs(deps)
    name = field(body, "name", str)
    metadata = _object(body, "metadata") or {}
    # A langgraph.json's auth: only the assistants its filter lets through.
    value = {
        "assistant_id": body.get("assistant_id"),
        "graph_id": graph_id,
        "metadata": metadata,
        "limit": body.get("limit"),
        "offset": body.get("offset"),
    }
    filters = await end_users.authorize(request, deps, "assistants", "search", value)
    found = [
        a
        for a in await deps.engine.assistants.all()
        if _sees(caller, a)
        and (not graph_id or a.graph_id == graph_id)
        and (not name or name.lower() in a.name.lower())
        and _contains(a.metadata, metadata)
        and (not filters or matches(a.metadata, filters))
    ]
    sort_by = (field(body, "sort_by", str) or "created_at").lower()
    if sort_by not in SORT_BY:
        raise ApiError(422, f"sort_by must be one of {', '.join(SORT_BY)}")
    order = (field(body, "sort_order", str) or "desc").lower()
    if order not in ("asc", "desc"):
        raise ApiError(422, "sort_order must be 'asc' or 'desc'")
    shaped = {a.assistant_id: shape(a) for a in found}

    def key(a: AssistantRecord) -> Any:
        if sort_by in ("name", "graph_id"):
            return str(getattr(a, sort_by)).lower()
        if sort_by in ("created_at", "updated_at"):
            return getattr(a, sort_by)
        return shaped[a.assistant_id][sort_by]

    return sorted(found, key=key, reverse=order == "desc")


async def search(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    body = await body_of(request)
    select = field(body, "select", list)
    if select is not None:
        wrong = [s for s in select if s not in SELECT]
        if wrong:
            raise ApiError(422, f"Invalid select columns: {wrong}. Expected: {list(SELECT)}")
    limit, offset = limit_offset(body)
    found = await _matching(request, caller, deps)
    page = [shape(a) for a in found[offset : offset + limit]]
    if select:
        page = [{k: v for k, v in a.items() if k in select} for a in page]
    response = json_response(page)
    # LangGraph's server's paging headers: the total so far, and the next offset.
    if len(found) > offset + limit:
        response.headers["X-Pagination-Total"] = str(offset + limit + 1)
        response.headers["X-Pagination-Next"] = str(offset + limit)
    else:
        response.headers["X-Pagination-Total"] = str(offset + len(page))
    return response


async def count(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    return json_response(len(await _matching(request, caller, deps)))


async def describe(
    deps: Deps, caller: Caller | None, graph_id: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The graph's description from one of its replicas; 404 when none serves it.
    `params`: what else to draw or list (`langgraph/describe`'s xray, subgraphs)."""
    require(caller, READ)
    if caller is not None and caller.role == auth.AGENT and caller.agent != graph_id:
        raise not_found(f"assistant {graph_id}")
    try:
        described = await deps.relay.call(
            caller, graph_id, auth.JSONRPC_GRAPH_DESCRIBE, params or {}
        )
    except NotAnswered as exc:
        if exc.dispatched:
            raise
        raise not_found(f"assistant of graph {graph_id} (no replica serves it)") from None
    deps.directory.heard(graph_id)
    return described if isinstance(described, dict) else {}


async def for_run(
    deps: Deps, caller: Caller | None, value: Any, *, served: bool = True
) -> AssistantRecord:
    """The assistant a run names. `served`: its graph must be served by a replica
    (announced, or answering now), 404 otherwise; a run the service journals itself
    waits for one instead (web/langgraph/handoff_start.py)."""
    require(caller, READ)
    record = await resolve(deps, caller, value)
    if served and record.graph_id not in deps.directory.agents():
        await describe(deps, caller, record.graph_id)
    return record


async def _described(
    request: web.Request,
    caller: Caller | None,
    deps: Deps,
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    record = await resolve(deps, caller, request.match_info["assistant_id"])
    return await describe(deps, caller, record.graph_id, params)


async def graph(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    xray = _xray(request.query.get("xray", "false"))
    described = await _described(request, caller, deps, {"xray": xray} if xray else None)
    return json_response(described.get("graph") or {"nodes": [], "edges": []})


def _xray(raw: str) -> bool | int:
    """`?xray=`: true, false, or how many levels of subgraphs to draw."""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if raw.isdigit():
        return int(raw)
    raise ApiError(422, "xray must be true, false or a whole number of subgraph levels")


async def schemas(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    described = await _described(request, caller, deps)
    return json_response(described.get("schemas") or {})


async def subgraphs(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """The graph's subgraphs with their schemas, by namespace (all of them with
    `recurse`; under `/subgraphs/{namespace}`, that one's)."""
    recurse = request.query.get("recurse", "false").lower()
    if recurse not in ("true", "false"):
        raise ApiError(422, "recurse must be true or false")
    asked: dict[str, Any] = {"recurse": recurse == "true"}
    if namespace := request.match_info.get("namespace"):
        asked["namespace"] = namespace
    described = await _described(request, caller, deps, {"subgraphs": asked})
    return json_response(described.get("subgraphs") or {})
