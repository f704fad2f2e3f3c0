"""LangGraph's API on the service's HTTP port, so panels and programs written for
LangGraph's server (`langgraph-sdk`, `@langchain/langgraph-sdk` and its `useStream`,
`RemoteGraph`) drive turnkeeper by changing nothing but the URL and the API key
(docs/langgraph-api.md).

Assistants are stored configurations of the graphs replicas serve, each graph
with a default one (`assistants.py`); threads are
the journal's, with metadata (`threads.py`); a run is a turn (`runs.py`), streamed
from the journal with the rewind rule of `stream.py`. Tokens and roles are the
service's: the SDKs' `x-api-key` is read as a bearer token (`api.py`).
"""

from __future__ import annotations

from aiohttp import web

from turnkeeper_server.web.langgraph import (
    assistants,
    crons,
    effects,
    end_users,
    runs,
    store,
    thread_lists,
    threads,
    webhooks,
)
from turnkeeper_server.web.langgraph.api import Deps, Endpoint, handler, json_response
from turnkeeper_server.web.langgraph.cors import Cors
from turnkeeper_server.web.langgraph.crons import CronScheduler
from turnkeeper_server.web.langgraph.custom_auth import Resource
from turnkeeper_server.web.langgraph.openapi import declare, docs_page, openapi_json, version

__all__ = ["Cors", "CronScheduler", "Deps", "add_routes"]


def add_routes(app: web.Application, deps: Deps) -> None:
    router = app.router

    def route(
        method: str, path: str, fn: Endpoint, guarded: tuple[Resource, str] | None = None
    ) -> None:
        # Behind a langgraph.json's auth when one is configured (end_users.py): the
        # resource and action its handlers are asked for on the thread or assistant
        # the path names; the routes without one ask from inside (create, search).
        resource, action = guarded if guarded is not None else (None, None)
        router.add_route(method, path, handler(end_users.guard(fn, resource, action), deps))
        # In /openapi.json: what openapi.DECLARED says of it, else fn's docstring.
        declare(app, method, path, fn)

    assistant_read: tuple[Resource, str] = ("assistants", "read")
    read: tuple[Resource, str] = ("threads", "read")
    route("POST", "/assistants", assistants.create)
    route("POST", "/assistants/search", assistants.search)
    route("POST", "/assistants/count", assistants.count)
    route("GET", "/assistants/{assistant_id}", assistants.get, assistant_read)
    route("PATCH", "/assistants/{assistant_id}", assistants.update)
    route("DELETE", "/assistants/{assistant_id}", assistants.delete, ("assistants", "delete"))
    route("POST", "/assistants/{assistant_id}/versions", assistants.versions, assistant_read)
    route("POST", "/assistants/{assistant_id}/latest", assistants.set_latest)
    route("GET", "/assistants/{assistant_id}/graph", assistants.graph, assistant_read)
    route("GET", "/assistants/{assistant_id}/schemas", assistants.schemas, assistant_read)
    route("GET", "/assistants/{assistant_id}/subgraphs", assistants.subgraphs, assistant_read)
    route(
        "GET",
        "/assistants/{assistant_id}/subgraphs/{namespace}",
        assistants.subgraphs,
        assistant_read,
    )

    route("POST", "/threads", threads.create)
    route("POST", "/threads/search", thread_lists.search)
    route("POST", "/threads/count", thread_lists.count)
    route("POST", "/threads/prune", thread_lists.prune)
    route("GET", "/threads/{thread_id}", threads.get, read)
    route("PATCH", "/threads/{thread_id}", threads.update)
    route("DELETE", "/threads/{thread_id}", threads.delete, ("threads", "delete"))
    route("POST", "/threads/{thread_id}/copy", threads.copy, read)
    route("GET", "/threads/{thread_id}/state", threads.state, read)
    route("POST", "/threads/{thread_id}/state", threads.update_state, ("threads", "update"))
    route("POST", "/threads/{thread_id}/state/checkpoint", threads.state, read)
    route("GET", "/threads/{thread_id}/state/{checkpoint_id}", threads.state, read)
    route("GET", "/threads/{thread_id}/history", threads.history, read)
    route("POST", "/threads/{thread_id}/history", threads.history, read)

    # A run is its thread's, for the handlers too (`threads` resource, as LangGraph's).
    route("POST", "/threads/{thread_id}/runs", runs.create)
    route("GET", "/threads/{thread_id}/runs", runs.list_, ("threads", "search"))
    route("POST", "/threads/{thread_id}/runs/stream", runs.stream)
    route("POST", "/threads/{thread_id}/runs/wait", runs.wait)
    route("GET", "/threads/{thread_id}/runs/{run_id}", runs.get, read)
    route("DELETE", "/threads/{thread_id}/runs/{run_id}", runs.delete, ("threads", "delete"))
    route("POST", "/threads/{thread_id}/runs/{run_id}/cancel", runs.cancel, ("threads", "update"))
    route("GET", "/threads/{thread_id}/runs/{run_id}/join", runs.join, read)
    route("GET", "/threads/{thread_id}/runs/{run_id}/stream", runs.join_stream, read)
    route("GET", "/threads/{thread_id}/runs/{run_id}/effects", effects.list_, read)
    route("GET", "/threads/{thread_id}/runs/{run_id}/webhook", webhooks.get_, read)
    route("POST", "/runs", runs.create)
    route("POST", "/runs/cancel", runs.cancel_many)
    route("POST", "/runs/batch", runs.create_batch)
    route("POST", "/runs/stream", runs.stream)
    route("POST", "/runs/wait", runs.wait)

    # Crons (crons.py): schedules in the journal, fired by every replica's scheduler.
    route("POST", "/runs/crons", crons.create)
    route("POST", "/runs/crons/search", crons.search)
    route("POST", "/runs/crons/count", crons.count)
    route("GET", "/runs/crons/{cron_id}", crons.get)
    route("PATCH", "/runs/crons/{cron_id}", crons.update)
    route("DELETE", "/runs/crons/{cron_id}", crons.delete)
    route("POST", "/threads/{thread_id}/runs/crons", crons.create_for_thread, read)

    # LangGraph's long-term memory (store.py); the handlers are asked from inside.
    route("PUT", "/store/items", store.put_item)
    route("GET", "/store/items", store.get_item)
    route("DELETE", "/store/items", store.delete_item)
    route("POST", "/store/items/search", store.search_items)
    route("POST", "/store/namespaces", store.list_namespaces)

    async def info(request: web.Request) -> web.StreamResponse:
        """The server's version and features, in the keys LangGraph's server answers."""
        return json_response(
            {
                "version": version("turnkeeper-server"),
                "langgraph_py_version": version("langgraph"),
                "flags": {
                    "assistants": True,
                    "crons": True,
                    "langsmith": False,
                    "langsmith_tracing_replicas": False,
                    "langsmith_tracing_session_on_runs": False,
                },
                "host": {
                    "kind": "self-hosted",
                    "project_id": None,
                    "host_revision_id": None,
                    "revision_id": None,
                    "tenant_id": None,
                },
            }
        )

    async def ok(request: web.Request) -> web.StreamResponse:
        """The HTTP side answers (the service's own health: /v1/health)."""
        return json_response({"ok": True, "services": {}})

    router.add_get("/info", info)
    router.add_get("/ok", ok)
    router.add_get("/openapi.json", openapi_json)
    router.add_get("/docs", docs_page)
    for method, path, fn in (("GET", "/info", info), ("GET", "/ok", ok)):
        declare(app, method, path, fn)
