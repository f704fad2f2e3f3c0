"""Where the LangGraph API asks a `langgraph.json`'s auth (custom_auth.py) about its
end users: every request authenticated, a route naming a thread or an assistant
checked against the handler's filter (not found when it hides it), a create's
metadata stamped by the handler, a search narrowed by the filter.

Runs are the `threads` resource, as on LangGraph's server: a run is read, created
(`create_run`), cancelled (`update`) and deleted under its thread's filter.
Without an auth object every hook here is a no-op.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from aiohttp import web
from turnkeeper._run_request import default_assistant_id

from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web.langgraph.api import EMPTY, Deps, Endpoint, json_of
from turnkeeper_server.web.langgraph.custom_auth import EndUser, Filters, Resource, matches
from turnkeeper_server.web.langgraph.errors import ApiError, not_found

END_USER: Final = web.RequestKey("turnkeeper_langgraph_end_user", EndUser)


def guard(fn: Endpoint, resource: Resource | None = None, action: str | None = None) -> Endpoint:
    """`fn` behind the auth object: its end user authenticated first; on a route
    that names a thread (runs included) or an assistant, the handler for `action`
    asked, and what its filter hides answered as not found."""

    async def guarded(
        request: web.Request, caller: Caller | None, deps: Deps
    ) -> web.StreamResponse:
        custom = deps.custom_auth
        if custom is not None:
            request[END_USER] = await custom.authenticate(request, lambda: _sent(request))
            if resource is not None and action is not None:
                await _check_path(request, deps, resource, action)
        return await fn(request, caller, deps)

    return guarded


async def _sent(request: web.Request) -> Any:
    """The body, for an authenticate handler that asks for it: the JSON value sent
    (an object, or a batch's array), {} when none was."""
    body = await json_of(request)
    return {} if body is EMPTY else body


async def authorize(
    request: web.Request, deps: Deps, resource: Resource, action: str, value: dict[str, Any]
) -> Filters | None:
    """The handler's filter for `action` on `resource` (None: no auth, or no filter);
    it may have changed `value` (stamped its metadata)."""
    if deps.custom_auth is None:
        return None
    return await deps.custom_auth.authorize(request[END_USER], resource, action, value)


async def create_thread(request: web.Request, deps: Deps, value: dict[str, Any]) -> None:
    """`threads.create` asked with `value` (thread_id, metadata, if_exists), which it
    may stamp; a thread of that id the filter hides is a conflict (409), as on
    LangGraph's server, never handed back by `if_exists="do_nothing"`."""
    filters = await authorize(request, deps, "threads", "create", value)
    if filters:
        existing = await deps.engine.threads.get(value["thread_id"])
        if existing is not None and not matches(existing.metadata, filters):
            raise ApiError(409, f"thread {value['thread_id']} already exists")


async def update_thread(
    request: web.Request, deps: Deps, thread_id: str, metadata: dict[str, Any]
) -> dict[str, Any]:
    """`threads.update` asked with the metadata sent, which it may stamp (an owner
    kept); returns what is to be merged. A thread its filter hides is not found."""
    value: dict[str, Any] = {"thread_id": thread_id, "metadata": metadata}
    filters = await authorize(request, deps, "threads", "update", value)
    if filters:
        record = await deps.engine.threads.get(thread_id)
        if record is not None and not matches(record.metadata, filters):
            raise not_found(f"thread {thread_id}")
    stamped = value.get("metadata")
    return dict(stamped) if isinstance(stamped, dict) else {}


async def create_run(
    request: web.Request, deps: Deps, thread_id: str | None, body: Mapping[str, Any]
) -> dict[str, Any]:
    """`threads.create_run` asked; returns the run's metadata as the handler left it
    (what a thread the run makes is stamped with). A thread its filter hides is
    not found."""
    if deps.custom_auth is None:
        return {}
    value: dict[str, Any] = {
        "thread_id": thread_id,
        "assistant_id": body.get("assistant_id"),
        "run_id": None,
        "status": "pending",
        "metadata": dict(body.get("metadata") or {}),
        "prevent_insert_if_inflight": True,
        "multitask_strategy": body.get("multitask_strategy", "reject"),
        "if_not_exists": body.get("if_not_exists", "reject"),
        "after_seconds": body.get("after_seconds"),
        "kwargs": {k: body.get(k) for k in ("input", "command", "config", "context")},
    }
    filters = await authorize(request, deps, "threads", "create_run", value)
    if filters and thread_id is not None:
        record = await deps.engine.threads.get(thread_id)
        if record is not None and not matches(record.metadata, filters):
            raise not_found(f"thread {thread_id}")
    metadata = value.get("metadata")
    return dict(metadata) if isinstance(metadata, dict) else {}


async def threads_shown(
    deps: Deps, filters: Filters | None, thread_ids: Iterable[str | None]
) -> set[str | None]:
    """Those of `thread_ids` whose thread the handler's filter matches (all of them
    without a filter; never a thread that is not there, nor None)."""
    wanted = set(thread_ids)
    if not filters:
        return wanted
    shown: set[str | None] = set()
    for thread_id in wanted:
        record = await deps.engine.threads.get(thread_id) if thread_id is not None else None
        if record is not None and matches(record.metadata, filters):
            shown.add(thread_id)
    return shown


def narrowed(
    metadata: Mapping[str, Any], filters: Filters | None
) -> tuple[dict[str, Any] | None, Filters | None]:
    """A search's metadata with the filter's plain equalities folded in, and what
    is left of the filter to test row by row. None for the metadata: nothing can
    match (the search asks for another value of a key the filter fixes)."""
    if not filters:
        return dict(metadata), None
    merged = dict(metadata)
    rest: Filters = {}
    for key, wanted in filters.items():
        if isinstance(wanted, dict) and set(wanted) == {"$eq"}:
            wanted = wanted["$eq"]
        elif key.startswith("$") or isinstance(wanted, dict):
            rest[key] = wanted
            continue
        if key in merged and merged[key] != wanted:
            return None, None
        merged[key] = wanted
    return merged, rest or None


async def _assistant_metadata(deps: Deps, assistant_id: str) -> dict[str, Any] | None:
    """The stored assistant's metadata (by its id, or a graph's default by the
    graph's name); None for none."""
    record = await deps.engine.assistants.get(assistant_id)
    if record is None:
        record = await deps.engine.assistants.get(default_assistant_id(assistant_id))
    return None if record is None else record.metadata


async def _check_path(request: web.Request, deps: Deps, resource: Resource, action: str) -> None:
    info = request.match_info
    if resource == "threads" and "thread_id" in info:
        value = {"thread_id": info["thread_id"]}
        if "run_id" in info:
            value["run_id"] = info["run_id"]
        filters = await authorize(request, deps, resource, action, value)
        if filters:
            record = await deps.engine.threads.get(info["thread_id"])
            if record is not None and not matches(record.metadata, filters):
                raise not_found(f"thread {info['thread_id']}")
    elif resource == "assistants" and "assistant_id" in info:
        filters = await authorize(
            request, deps, resource, action, {"assistant_id": info["assistant_id"]}
        )
        if filters:
            metadata = await _assistant_metadata(deps, info["assistant_id"])
            if metadata is not None and not matches(metadata, filters):
                raise not_found(f"assistant {info['assistant_id']}")
