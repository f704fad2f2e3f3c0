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

from aiohttp import web

from turnkeeper_server.web.langgraph import assistants, effects, runs, threads
from turnkeeper_server.web.langgraph.api import Deps, Endpoint, handler, json_response
from turnkeeper_server.web.langgraph.cors import Cors

__all__ = ["Cors", "Deps", "add_routes"]


def add_routes(app: web.Application, deps: Deps) -> None:
    router = app.router

    def route(method: str, path: str, fn: Endpoint) -> None:
        router.add_route(method, path, handler(fn, deps))

    route("POST", "/assistants/search", assistants.search)
    route("POST", "/assistants/count", assistants.count)
    route("GET", "/assistants/{assistant_id}", assistants.get)
    route("GET", "/assistants/{assistant_id}/graph", assistants.graph)
    route("GET", "/assistants/{assistant_id}/schemas", assistants.schemas)
    route("GET", "/assistants/{assistant_id}/subgraphs", assistants.subgraphs)

    route("POST", "/threads", threads.create)
    route("POST", "/threads/search", threads.search)
    route("POST", "/threads/count", threads.count)
    route("GET", "/threads/{thread_id}", threads.get)
    route("PATCH", "/threads/{thread_id}", threads.update)
    route("DELETE", "/threads/{thread_id}", threads.delete)
    route("POST", "/threads/{thread_id}/copy", threads.copy)
    route("GET", "/threads/{thread_id}/state", threads.state)
    route("POST", "/threads/{thread_id}/state", threads.update_state)
    route("POST", "/threads/{thread_id}/state/checkpoint", threads.state)
    route("GET", "/threads/{thread_id}/state/{checkpoint_id}", threads.state)
    route("GET", "/threads/{thread_id}/history", threads.history)
    route("POST", "/threads/{thread_id}/history", threads.history)

    route("POST", "/threads/{thread_id}/runs", runs.create)
    route("GET", "/threads/{thread_id}/runs", runs.list_)
    route("POST", "/threads/{thread_id}/runs/stream", runs.stream)
    route("POST", "/threads/{thread_id}/runs/wait", runs.wait)
    route("GET", "/threads/{thread_id}/runs/{run_id}", runs.get)
    route("DELETE", "/threads/{thread_id}/runs/{run_id}", runs.delete)
    route("POST", "/threads/{thread_id}/runs/{run_id}/cancel", runs.cancel)
    route("GET", "/threads/{thread_id}/runs/{run_id}/join", runs.join)
    route("GET", "/threads/{thread_id}/runs/{run_id}/stream", runs.join_stream)
    route("GET", "/threads/{thread_id}/runs/{run_id}/effects", effects.list_)
    route("POST", "/runs", runs.create)
    route("POST", "/runs/stream", runs.stream)
    route("POST", "/runs/wait", runs.wait)

    async def info(request: web.Request) -> web.StreamResponse:
        return json_response(
            {"version": "turnkeeper", "flags": {"assistants": True, "crons": False}}
        )

    async def ok(request: web.Request) -> web.StreamResponse:
        return json_response({"ok": True})

    router.add_get("/info", info)
    router.add_get("/ok", ok)
