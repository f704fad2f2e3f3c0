"""The store: LangGraph's long-term memory (`client.store.*`), kept in the journal
(engine/store_items.py) on either backend, with the reference server's routes and
shapes: PUT, GET and DELETE /store/items, POST /store/items/search and
/store/namespaces.

Rights (decisions 315, 351): reading (get, search, list_namespaces) is the read
right, writing (put, delete) the right to start a run. Agents, operators and
admins use the whole store. A panel token (a user interface shared by its users)
reaches it only for an end user whom a langgraph.json's `@auth.on.store` handler
confines (`_confine`): without end users, or without a handler for the action,
its store calls are refused (403). Under a langgraph.json's auth the handlers are
asked as the reference asks them (resource "store", actions put, get, delete,
search, list_namespaces, with the same values), and they may change the
namespace; a search's filter they answer narrows the search. Semantic search (`query`)
ranks by similarity where the langgraph.json configures `store.index` (decision
350), each item with its `score`; without an index a query is refused (422,
decision 316) rather than answered unranked.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from turnkeeper_server.engine.store_items import NO_INDEX
from turnkeeper_server.journal.store_items import StoreItem
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web.langgraph import end_users, shapes
from turnkeeper_server.web.langgraph.api import (
    READ,
    THREADS_WRITE,
    Deps,
    body_of,
    field,
    json_response,
    require,
)
from turnkeeper_server.web.langgraph.errors import ApiError

MAX_KEY_CHARS = 1024


def _confine(caller: Caller | None, deps: Deps, action: str) -> None:
    """A panel's store call only for an end user whom a store handler confines
    (decision 351): a panel serves many users, and the store holds all of theirs."""
    if caller is None or caller.role != auth.PANEL:
        return
    if deps.custom_auth is None:
        raise ApiError(
            403,
            f"{caller} may not use the store without end users: a panel reaches the "
            "store for an end user, confined by an @auth.on.store handler of the "
            "langgraph.json's auth; use an operator's or an agent's token otherwise",
        )
    if not deps.custom_auth.handles("store", action):
        raise ApiError(
            403,
            f"{caller} may not {action} store items: no @auth.on.store handler of the "
            f"langgraph.json's auth ({deps.custom_auth.spec}) confines this end user's "
            f"store calls; add one (for {action!r}, for the store, or @auth.on)",
        )


def _namespace(value: Any, what: str = "namespace") -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise ApiError(422, f"{what} must be a list of labels")
    for label in value:
        if not isinstance(label, str) or not label or "." in label:
            raise ApiError(
                422, f"{what} label {label!r} must be a non-empty string without periods"
            )
    return tuple(value)


def _key(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ApiError(422, "key must be a non-empty string")
    if len(value) > MAX_KEY_CHARS:
        raise ApiError(422, f"key must be at most {MAX_KEY_CHARS} characters")
    return value


def _whole(body: dict[str, Any], name: str, default: int, low: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ApiError(422, f"{name} must be a whole number of at least {low}")
    return value


def shape(item: StoreItem, *, search: bool = False, score: float | None = None) -> dict[str, Any]:
    """An item with the keys LangGraph's server answers (Item.dict(); a search's
    SearchItem with its score)."""
    out: dict[str, Any] = {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": item.value,
        "created_at": shapes.iso(item.created_at),
        "updated_at": shapes.iso(item.updated_at),
    }
    if search:
        out["score"] = score
    return out


async def put_item(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """Store or update an item (204)."""
    require(caller, THREADS_WRITE)
    _confine(caller, deps, "put")
    body = await body_of(request)
    value = body.get("value")
    if not isinstance(value, dict):
        raise ApiError(422, "value must be an object")
    ttl = body.get("ttl")
    if ttl is not None and (isinstance(ttl, bool) or not isinstance(ttl, int | float) or ttl <= 0):
        raise ApiError(422, "ttl must be a positive number of minutes, or null")
    index = body.get("index")
    if (
        index is not None
        and index is not False
        and not (isinstance(index, list) and all(isinstance(p, str) and p for p in index))
    ):
        raise ApiError(422, "index must be false, null or a list of paths (strings)")
    payload: dict[str, Any] = {
        "namespace": _namespace(body.get("namespace") or ()),
        "key": _key(body.get("key")),
        "value": value,
        "index": index,
        "ttl": ttl,
    }
    await end_users.authorize(request, deps, "store", "put", payload)
    await deps.engine.store.put(
        _namespace(payload["namespace"]),
        _key(payload["key"]),
        payload["value"],
        payload["ttl"],
        index=payload["index"],
    )
    return web.Response(status=204)


async def get_item(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    """One item by namespace and key (null when there is none)."""
    require(caller, READ)
    _confine(caller, deps, "get")
    namespace = _namespace(request.query.get("namespace", "").split("."))
    key = request.query.get("key")
    if not key:
        raise ApiError(400, "Key is required")
    raw = request.query.get("refresh_ttl")
    payload: dict[str, Any] = {
        "namespace": namespace,
        "key": key,
        "refresh_ttl": None if raw is None else raw.lower() == "true",
    }
    await end_users.authorize(request, deps, "store", "get", payload)
    item = await deps.engine.store.get(
        _namespace(payload["namespace"]), _key(payload["key"]), payload["refresh_ttl"]
    )
    return json_response(None if item is None else shape(item))


async def delete_item(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    """Delete an item (204, whether or not it was there)."""
    require(caller, THREADS_WRITE)
    _confine(caller, deps, "delete")
    body = await body_of(request)
    payload: dict[str, Any] = {
        "namespace": _namespace(body.get("namespace") or ()),
        "key": _key(body.get("key")),
    }
    await end_users.authorize(request, deps, "store", "delete", payload)
    await deps.engine.store.delete(_namespace(payload["namespace"]), _key(payload["key"]))
    return web.Response(status=204)


async def search_items(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    """Items under a namespace prefix matching a filter, newest first, paged."""
    require(caller, READ)
    _confine(caller, deps, "search")
    body = await body_of(request)
    refresh = body.get("refresh_ttl")
    if refresh is not None and not isinstance(refresh, bool):
        raise ApiError(422, "refresh_ttl must be true, false or null")
    payload: dict[str, Any] = {
        "namespace": _namespace(body.get("namespace_prefix") or (), "namespace_prefix"),
        "filter": field(body, "filter", dict),
        "limit": _whole(body, "limit", 10, 1),
        "offset": _whole(body, "offset", 0, 0),
        "query": field(body, "query", str),
        "refresh_ttl": refresh,
    }
    narrowed = await end_users.authorize(request, deps, "store", "search", payload)
    if payload["query"] and deps.engine.store.index is None:
        raise ApiError(422, NO_INDEX)
    found = await deps.engine.store.search(
        _namespace(payload["namespace"], "namespace_prefix"),
        [f for f in (payload["filter"], narrowed) if f],
        payload["limit"],
        payload["offset"],
        payload["refresh_ttl"],
        payload["query"] or None,
    )
    return json_response({"items": [shape(i, search=True, score=s) for i, s in found]})


async def list_namespaces(
    request: web.Request, caller: Caller | None, deps: Deps
) -> web.StreamResponse:
    """The namespaces holding items, by prefix, suffix and depth, sorted, paged."""
    require(caller, READ)
    _confine(caller, deps, "list_namespaces")
    body = await body_of(request)
    max_depth = body.get("max_depth")
    if max_depth is not None and (
        isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1
    ):
        raise ApiError(422, "max_depth must be a whole number of at least 1, or null")
    payload: dict[str, Any] = {
        "namespace": _namespace(body["prefix"], "prefix") if body.get("prefix") else None,
        "suffix": _namespace(body["suffix"], "suffix") if body.get("suffix") else None,
        "max_depth": max_depth,
        "limit": _whole(body, "limit", 100, 1),
        "offset": _whole(body, "offset", 0, 0),
    }
    await end_users.authorize(request, deps, "store", "list_namespaces", payload)
    prefix, suffix = payload["namespace"], payload["suffix"]
    found = await deps.engine.store.list_namespaces(
        None if prefix is None else _namespace(prefix, "prefix"),
        None if suffix is None else _namespace(suffix, "suffix"),
        payload["max_depth"],
        payload["limit"],
        payload["offset"],
    )
    return json_response({"namespaces": [list(ns) for ns in found]})
