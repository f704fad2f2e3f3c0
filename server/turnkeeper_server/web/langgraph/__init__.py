"""LangGraph's API on the service's HTTP port, so panels and programs written for
LangGraph's server (`langgraph-sdk`, `@langchain/langgraph-sdk` and its `useStream`,
`RemoteGraph`) drive turnkeeper by changing nothing but the URL and the API key
(docs/langgraph-api.md).

Assistants are the agents the replicas announce (`assistants.py`); threads are
the journal's, with metadata (`threads.py`); a run is a turn (`runs.py`), streamed
from the journal with the rewind rule of `stream.py`. Tokens and roles are the
service's: the SDKs' `x-api-key` is read as a bearer token (`api.py`).
"""

from __future__ import annotations

from dataclasses import replace

from aiohttp import web

from turnkeeper_server.web.langgraph import assistants, effects, end_users, runs, threads
from turnkeeper_server.web.langgraph.api import Deps, Endpoint, handler, json_response
from turnkeeper_server.web.langgraph.cors import Cors
from turnkeeper_server.web.langgraph.custom_auth import Resource
from turnkeeper_server.web.langgraph.openapi import (
    COUNT,
    INFO,
    OK,
    THREAD,
    THREAD_COUNT,
    THREAD_CREATE,
    THREAD_PRUNE,
    THREAD_PRUNED,
    THREAD_SEARCH,
    Doc,
    declare,
    docs_page,
    openapi_json,
    version,
)

__all__ = ["Cors", "Deps", "add_routes"]


def add_routes(app: web.Application, deps: Deps) -> None:
    router = app.router

    def route(
        method: str,
        path: str,
        fn: Endpoint,
        guarded: tuple[Resource, str] | None = None,
        doc: Doc | None = None,
    ) -> None:
        # Behind a langgraph.json's auth when one is configured (end_users.py): the
        # resource and action its handlers are asked for on the thread or assistant
        # the path names; the routes without one ask from inside (create, search).
        resource, action = guarded if guarded is not None else (None, None)
        router.add_route(method, path, handler(end_users.guard(fn, resource, action), deps))
        # In /openapi.json: what is declared here, else the endpoint's docstring.
        declare(app, method, path, doc or Doc(_first_line(fn.__doc__) or f"{method} {path}"))

    assistant_read: tuple[Resource, str] = ("assistants", "read")
    read: tuple[Resource, str] = ("threads", "read")
    route("POST", "/assistants/search", assistants.search, doc=Doc("Search assistants"))
    route("POST", "/assistants/count", assistants.count, doc=Doc("Count assistants"))
    route(
        "GET", "/assistants/{assistant_id}", assistants.get, assistant_read, Doc("Get an assistant")
    )
    route(
        "GET",
        "/assistants/{assistant_id}/graph",
        assistants.graph,
        assistant_read,
        Doc("Get an assistant's graph", query=("xray",)),
    )
    route(
        "GET",
        "/assistants/{assistant_id}/schemas",
        assistants.schemas,
        assistant_read,
        Doc("Get an assistant's schemas"),
    )
    route(
        "GET",
        "/assistants/{assistant_id}/subgraphs",
        assistants.subgraphs,
        assistant_read,
        Doc("Get an assistant's subgraphs"),
    )

    one_thread = Doc("", response=THREAD)
    route("POST", "/threads", threads.create, doc=Doc("Create a thread", THREAD_CREATE, THREAD))
    route(
        "POST",
        "/threads/search",
        threads.search,
        doc=Doc("Search threads", THREAD_SEARCH, THREAD, many=True),
    )
    route("POST", "/threads/count", threads.count, doc=Doc("Count threads", THREAD_COUNT, COUNT))
    route(
        "POST",
        "/threads/prune",
        threads.prune,
        doc=Doc("Erase threads by id", THREAD_PRUNE, THREAD_PRUNED),
    )
    route(
        "GET",
        "/threads/{thread_id}",
        threads.get,
        read,
        replace(one_thread, summary="Get a thread"),
    )
    route(
        "PATCH",
        "/threads/{thread_id}",
        threads.update,
        doc=replace(one_thread, summary="Update a thread's metadata"),
    )
    route(
        "DELETE",
        "/threads/{thread_id}",
        threads.delete,
        ("threads", "delete"),
        Doc("Delete a thread (the service's erasure)", status=204),
    )
    route(
        "POST",
        "/threads/{thread_id}/copy",
        threads.copy,
        read,
        replace(one_thread, summary="Copy a thread"),
    )
    route(
        "GET",
        "/threads/{thread_id}/state",
        threads.state,
        read,
        Doc("Get a thread's state", query=("subgraphs",)),
    )
    route(
        "POST",
        "/threads/{thread_id}/state",
        threads.update_state,
        ("threads", "update"),
        Doc("Update a thread's state"),
    )
    route(
        "POST",
        "/threads/{thread_id}/state/checkpoint",
        threads.state,
        read,
        Doc("Get a thread's state at a checkpoint"),
    )
    route(
        "GET",
        "/threads/{thread_id}/state/{checkpoint_id}",
        threads.state,
        read,
        Doc("Get a thread's state at a checkpoint"),
    )
    route(
        "GET",
        "/threads/{thread_id}/history",
        threads.history,
        read,
        Doc("Get a thread's history", query=("limit", "before")),
    )
    route(
        "POST", "/threads/{thread_id}/history", threads.history, read, Doc("Get a thread's history")
    )

    # A run is its thread's, for the handlers too (`threads` resource, as LangGraph's).
    route("POST", "/threads/{thread_id}/runs", runs.create, doc=Doc("Create a run"))
    route(
        "GET",
        "/threads/{thread_id}/runs",
        runs.list_,
        ("threads", "search"),
        Doc("List a thread's runs", query=("limit", "offset", "status")),
    )
    route(
        "POST",
        "/threads/{thread_id}/runs/stream",
        runs.stream,
        doc=Doc("Create a run and stream it (SSE)"),
    )
    route(
        "POST",
        "/threads/{thread_id}/runs/wait",
        runs.wait,
        doc=Doc("Create a run and wait for its output"),
    )
    route("GET", "/threads/{thread_id}/runs/{run_id}", runs.get, read, Doc("Get a run"))
    route(
        "DELETE",
        "/threads/{thread_id}/runs/{run_id}",
        runs.delete,
        ("threads", "delete"),
        Doc("Delete a finished run", status=204),
    )
    route(
        "POST",
        "/threads/{thread_id}/runs/{run_id}/cancel",
        runs.cancel,
        ("threads", "update"),
        Doc("Cancel a run", query=("wait", "action")),
    )
    route(
        "GET",
        "/threads/{thread_id}/runs/{run_id}/join",
        runs.join,
        read,
        Doc("Wait for a run's output"),
    )
    route(
        "GET",
        "/threads/{thread_id}/runs/{run_id}/stream",
        runs.join_stream,
        read,
        Doc(
            "Join a run's stream (SSE; Last-Event-ID resumes)",
            query=("stream_mode", "cancel_on_disconnect"),
        ),
    )
    route(
        "GET",
        "/threads/{thread_id}/runs/{run_id}/effects",
        effects.list_,
        read,
        Doc("A run's effect ledger (turnkeeper's own)"),
    )
    route("POST", "/runs", runs.create, doc=Doc("Create a thread-less run"))
    route(
        "POST", "/runs/stream", runs.stream, doc=Doc("Create a thread-less run and stream it (SSE)")
    )
    route(
        "POST", "/runs/wait", runs.wait, doc=Doc("Create a thread-less run and wait for its output")
    )

    async def info(request: web.Request) -> web.StreamResponse:
        """What serves this API: its version and features, in the keys LangGraph's
        server answers."""
        return json_response(
            {
                "version": version("turnkeeper-server"),
                "langgraph_py_version": version("langgraph"),
                "flags": {
                    "assistants": True,
                    "crons": False,
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
    declare(
        app, "GET", "/info", Doc("The server's version and features", response=INFO, tag="System")
    )
    declare(app, "GET", "/ok", Doc("The server answers", response=OK, tag="System"))


def _first_line(doc: str | None) -> str:
    return " ".join((doc or "").strip().split("\n\n")[0].split())
