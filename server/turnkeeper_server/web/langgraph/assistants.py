"""Assistants: the agents whose replicas announce themselves (messaging/directory.py).

Each agent is one assistant whose id, graph id and name are the agent's name (the
graph's name in the `langgraph.json` it was hosted from). Assistants are not made
or versioned here: they are the graphs being served. The graph and its schemas are
asked of a replica (`langgraph/describe`).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web.langgraph import end_users, shapes
from turnkeeper_server.web.langgraph.api import (
    READ,
    Deps,
    agent_id,
    body_of,
    json_response,
    limit_offset,
    require,
)
from turnkeeper_server.web.langgraph.errors import ApiError, not_found
from turnkeeper_server.web.relay import NotAnswered


def _visible(caller: Caller | None, agents: list[str]) -> list[str]:
    if caller is not None and caller.role == auth.AGENT:
        return [a for a in agents if a == caller.agent]
    return agents


async def _matching(request: web.Request, caller: Caller | None, deps: Deps) -> list[str]:
    require(caller, READ)
    body = await body_of(request)
    agents = _visible(caller, deps.directory.agents())
    for key in ("graph_id", "name", "assistant_id"):
        wanted = body.get(key)
        if isinstance(wanted, str) and wanted:
            agents = [a for a in agents if a == wanted]
    metadata = body.get("metadata")
    if isinstance(metadata, dict) and metadata:
        agents = [a for a in agents if _has(shapes.assistant(a)["metadata"], metadata)]
    # A langgraph.json's auth: only the assistants its filter lets through.
    value = {k: body.get(k) for k in ("assistant_id", "graph_id", "metadata", "limit", "offset")}
    filters = await end_users.authorize(request, deps, "assistants", "search", value)
    return end_users.visible_assistants(agents, filters)


def _has(metadata: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(metadata.get(k) == v for k, v in wanted.items())


async def search(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    agents = await _matching(request, caller, deps)
    limit, offset = limit_offset(await body_of(request))
    return json_response([shapes.assistant(a) for a in agents[offset : offset + limit]])


async def count(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    return json_response(len(await _matching(request, caller, deps)))


async def describe(
    deps: Deps, caller: Caller | None, assistant: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The agent's description from one of its replicas; 404 when none serves it.
    `params`: what else to draw or list (`langgraph/describe`'s xray, subgraphs)."""
    require(caller, READ)
    if caller is not None and caller.role == auth.AGENT and caller.agent != assistant:
        raise not_found(f"assistant {assistant}")
    try:
        described = await deps.relay.call(
            caller, assistant, auth.JSONRPC_GRAPH_DESCRIBE, params or {}
        )
    except NotAnswered as exc:
        if exc.dispatched:
            raise
        raise not_found(f"assistant {assistant} (no replica serves it)") from None
    deps.directory.heard(assistant)
    return described if isinstance(described, dict) else {}


async def known(deps: Deps, caller: Caller | None, assistant: str) -> None:
    """404 unless a replica serves `assistant` (announced, or answering now)."""
    visible = _visible(caller, deps.directory.agents())
    if assistant not in visible:
        await describe(deps, caller, assistant)


async def get(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    assistant = agent_id(request.match_info["assistant_id"])
    require(caller, READ)
    await known(deps, caller, assistant)
    return json_response(shapes.assistant(assistant))


async def graph(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    xray = _xray(request.query.get("xray", "false"))
    described = await describe(
        deps, caller, agent_id(request.match_info["assistant_id"]), {"xray": xray} if xray else None
    )
    return json_response(described.get("graph") or {"nodes": [], "edges": []})


def _xray(raw: str) -> bool | int:
    """`?xray=`: true, false, or how many levels of subgraphs to draw."""
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if raw.isdigit():
        return int(raw)
    raise ApiError(422, "xray must be true, false or a whole number of subgraph levels")


async def schemas(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    described = await describe(deps, caller, agent_id(request.match_info["assistant_id"]))
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
    assistant = agent_id(request.match_info["assistant_id"])
    described = await describe(deps, caller, assistant, {"subgraphs": asked})
    return json_response(described.get("subgraphs") or {})
