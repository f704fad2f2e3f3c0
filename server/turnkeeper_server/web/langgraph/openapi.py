"""The HTTP API's OpenAPI document, made from the routes the application serves.

    declare(app, "POST", "/threads/search", Doc("Search threads", request=SEARCH, ...))
    GET /openapi.json      # every route of the application, with what was declared
    GET /docs              # the same as a page (no script, nothing from elsewhere)

The document is walked from `app.router` when asked for, so a route is in it because
it is served and nothing is in it that is not; what a route adds (a summary, its
body's and answer's schemas, its query parameters) is declared beside it
(`web/langgraph/__init__.py`). A route without a declaration is listed with its
handler's first docstring line. The console's pages are pages, not API: left out.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any, Final

from aiohttp import web

from turnkeeper_server.web.langgraph import thread_lists, threads

Schema = dict[str, Any]


@dataclass(frozen=True)
class Named:
    """A schema of the document's `components`, referred to by name."""

    name: str
    schema: Schema

    def ref(self) -> Schema:
        return {"$ref": f"#/components/schemas/{self.name}"}


@dataclass(frozen=True)
class Doc:
    summary: str
    request: Named | None = None
    response: Named | None = None
    # The answer is a list of `response`.
    many: bool = False
    status: int = 200
    query: tuple[str, ...] = ()
    tag: str | None = None


DOCS: Final = web.AppKey("turnkeeper_openapi_docs", dict)
TITLE: Final = "turnkeeper: the LangGraph API and the service's HTTP routes"


def declare(app: web.Application, method: str, path: str, endpoint: Any) -> None:
    """What the document says of a route: DECLARED's entry, else the first paragraph
    of its endpoint's docstring."""
    if DOCS not in app:
        app[DOCS] = {}
    doc = DECLARED.get((method, path))
    if doc is None:
        doc = Doc(_summary(method, path, endpoint))
    app[DOCS][(method, path)] = doc


def documented(path: str) -> bool:
    """The routes the document lists: all but the console's pages."""
    return path != "/" and not path.startswith("/console/")


def served(app: web.Application) -> list[tuple[str, str, Any]]:
    """(method, path template, handler) of every route the document lists."""
    out = []
    for route in app.router.routes():
        resource = route.resource
        if resource is None or route.method in ("HEAD", "OPTIONS", "*"):
            continue
        path = resource.canonical
        if documented(path):
            out.append((route.method, path, route.handler))
    return out


def _tag(path: str) -> str:
    if path.startswith("/assistants"):
        return "Assistants"
    if re.match(r"^/threads/\{thread_id\}/runs", path):
        return "Thread Runs"
    if path.startswith("/threads"):
        return "Threads"
    if path.startswith("/runs"):
        return "Stateless Runs"
    if path.startswith("/turnkeeper."):
        return "turnkeeper (Connect)"
    if path.startswith("/v1/"):
        return "turnkeeper"
    return "System"


def _summary(method: str, path: str, handler: Any) -> str:
    if path.startswith("/turnkeeper."):
        rpc = path.rsplit(".", 1)[-1].replace("/", ".")
        return f"{rpc}: the gRPC method over Connect's JSON protocol (docs/console.md)"
    doc = getattr(handler, "__doc__", None) or ""
    first = doc.strip().split("\n\n")[0]
    return " ".join(first.split()) or f"{method} {path}"


_PARAM: Final = re.compile(r"\{([^}:]+)(?::[^}]*)?\}")
ERROR: Final = Named(
    "ErrorResponse",
    {
        "type": "object",
        "required": ["detail"],
        "properties": {"detail": {"type": "string", "description": "What went wrong"}},
    },
)


def document(app: web.Application) -> dict[str, Any]:
    docs: dict[tuple[str, str], Doc] = app.get(DOCS, {})
    paths: dict[str, dict[str, Any]] = {}
    components: dict[str, Schema] = {}

    def use(named: Named) -> Schema:
        components[named.name] = named.schema
        return named.ref()

    for method, path, handler in served(app):
        doc = docs.get((method, path))
        operation: dict[str, Any] = {
            "tags": [doc.tag if doc and doc.tag else _tag(path)],
            "summary": doc.summary if doc else _summary(method, path, handler),
            "operationId": re.sub(r"[^a-z0-9]+", "_", f"{method} {path}".lower()).strip("_"),
        }
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in _PARAM.findall(path)
        ]
        for name in doc.query if doc else ():
            parameters.append({"name": name, "in": "query", "schema": {"type": "string"}})
        if parameters:
            operation["parameters"] = parameters
        if doc and doc.request:
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": use(doc.request)}},
            }
        answer: dict[str, Any] = {"description": "Success"}
        if doc and doc.response:
            schema = use(doc.response)
            if doc.many:
                schema = {"type": "array", "items": schema}
            answer["content"] = {"application/json": {"schema": schema}}
        responses: dict[str, Any] = {str(doc.status if doc else 200): answer}
        if doc:
            responses["default"] = {
                "description": "An error: 403, 404, 409, 422, ...",
                "content": {"application/json": {"schema": use(ERROR)}},
            }
        operation["responses"] = responses
        paths.setdefault(path, {})[method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": TITLE, "version": version("turnkeeper-server") or "0"},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": dict(sorted(components.items()))},
    }


def version(distribution: str) -> str | None:
    """The installed version of a distribution (None: not installed)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


async def openapi_json(request: web.Request) -> web.StreamResponse:
    """The OpenAPI document of these routes."""
    return web.json_response(document(request.app))


async def docs_page(request: web.Request) -> web.StreamResponse:
    """The routes as a page: the OpenAPI document's operations, by tag."""
    spec = document(request.app)
    by_tag: dict[str, list[str]] = {}
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            row = (
                f"<tr><td><code>{method.upper()}</code></td><td><code>{html.escape(path)}"
                f"</code></td><td>{html.escape(op['summary'])}</td></tr>"
            )
            by_tag.setdefault(op["tags"][0], []).append(row)
    sections = "".join(
        f"<h3>{html.escape(tag)}</h3><table>{''.join(rows)}</table>" for tag, rows in by_tag.items()
    )
    page = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(TITLE)}</title>"
        '<link rel="stylesheet" href="/console/console.css"></head><body><main>'
        f"<h2>{html.escape(TITLE)}</h2>"
        '<p>The machine-readable document: <a href="/openapi.json">/openapi.json</a> '
        "(OpenAPI 3.1).</p>"
        f"{sections}</main></body></html>"
    )
    return web.Response(text=page, content_type="text/html")


# The schemas routes declare. A thread's fields are the ones `shapes.thread` writes
# (a test holds them to a real answer); the search options are threads.py's own.
_TIME: Final = {"type": "string", "format": "date-time"}
_OBJECT: Final = {"type": "object"}
THREAD: Final = Named(
    "Thread",
    {
        "type": "object",
        "required": ["thread_id", "created_at", "updated_at", "metadata", "status"],
        "properties": {
            "thread_id": {"type": "string"},
            "created_at": _TIME,
            "updated_at": _TIME,
            "state_updated_at": _TIME,
            "metadata": _OBJECT,
            "status": {"type": "string", "enum": list(thread_lists.STATUSES)},
            "values": {},
            "interrupts": _OBJECT,
            "config": _OBJECT,
        },
    },
)
_FILTERS: Final = {
    "metadata": {**_OBJECT, "description": "Keys the thread's metadata has, with these values"},
    "values": {**_OBJECT, "description": "What the thread's state contains (JSON containment)"},
    "status": {"type": "string", "enum": list(thread_lists.STATUSES)},
}
THREAD_SEARCH: Final = Named(
    "ThreadSearchRequest",
    {
        "type": "object",
        "properties": {
            **_FILTERS,
            "ids": {"type": "array", "items": {"type": "string"}, "maxItems": threads.MAX_IDS},
            "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "sort_by": {
                "type": "string",
                "enum": list(thread_lists.SORT_BY),
                "default": "updated_at",
            },
            "sort_order": {
                "type": "string",
                "enum": list(thread_lists.SORT_ORDER),
                "default": "desc",
            },
            "select": {
                "type": "array",
                "items": {"type": "string", "enum": list(thread_lists.SELECT)},
            },
            "extract": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "maxProperties": thread_lists.MAX_EXTRACT,
                "description": "alias: a path from " + ", ".join(thread_lists.EXTRACT_ROOTS),
            },
        },
    },
)
THREAD_COUNT: Final = Named("ThreadCountRequest", {"type": "object", "properties": _FILTERS})
COUNT: Final = Named("Count", {"type": "integer", "minimum": 0})
THREAD_PRUNE: Final = Named(
    "ThreadPruneRequest",
    {
        "type": "object",
        "required": ["thread_ids"],
        "properties": {
            "thread_ids": {
                "type": "array",
                "items": {"type": "string"},
                "maxItems": threads.MAX_IDS,
            },
            "strategy": {
                "type": "string",
                "enum": list(thread_lists.PRUNE_STRATEGIES),
                "default": "delete",
                "description": "keep_latest is refused (422)",
            },
        },
    },
)
THREAD_PRUNED: Final = Named(
    "ThreadPruneResponse",
    {
        "type": "object",
        "required": ["pruned_count"],
        "properties": {"pruned_count": {"type": "integer", "minimum": 0}},
    },
)
THREAD_CREATE: Final = Named(
    "ThreadCreate",
    {
        "type": "object",
        "properties": {
            "thread_id": {"type": "string"},
            "metadata": _OBJECT,
            "graph_id": {"type": "string"},
            "if_exists": {"type": "string", "enum": ["raise", "do_nothing"]},
        },
    },
)
OK: Final = Named(
    "Ok",
    {
        "type": "object",
        "required": ["ok"],
        "properties": {"ok": {"type": "boolean"}, "services": _OBJECT},
    },
)
INFO: Final = Named(
    "Info",
    {
        "type": "object",
        "required": ["version", "flags"],
        "properties": {
            "version": {"type": "string"},
            "langgraph_py_version": {"type": ["string", "null"]},
            "flags": {"type": "object", "additionalProperties": {"type": "boolean"}},
            "host": _OBJECT,
        },
    },
)

# What the document says of the LangGraph API's routes beyond their docstrings, by
# (method, path template) as `add_routes` serves them (a test holds every key to a
# served route). A route missing here is listed with its endpoint's docstring.
_THREAD_ONLY: Final = Doc("", response=THREAD)
DECLARED: Final[dict[tuple[str, str], Doc]] = {
    ("POST", "/assistants/search"): Doc("Search assistants"),
    ("POST", "/assistants/count"): Doc("Count assistants", response=COUNT),
    ("GET", "/assistants/{assistant_id}"): Doc("Get an assistant"),
    ("GET", "/assistants/{assistant_id}/graph"): Doc("Get an assistant's graph", query=("xray",)),
    ("GET", "/assistants/{assistant_id}/schemas"): Doc("Get an assistant's schemas"),
    ("GET", "/assistants/{assistant_id}/subgraphs"): Doc("Get an assistant's subgraphs"),
    ("POST", "/threads"): Doc("Create a thread", THREAD_CREATE, THREAD),
    ("POST", "/threads/search"): Doc("Search threads", THREAD_SEARCH, THREAD, many=True),
    ("POST", "/threads/count"): Doc("Count threads", THREAD_COUNT, COUNT),
    ("POST", "/threads/prune"): Doc("Erase threads by id", THREAD_PRUNE, THREAD_PRUNED),
    ("GET", "/threads/{thread_id}"): replace(_THREAD_ONLY, summary="Get a thread"),
    ("PATCH", "/threads/{thread_id}"): replace(
        _THREAD_ONLY, summary="Update a thread's metadata (Prefer: return=minimal: 204)"
    ),
    ("DELETE", "/threads/{thread_id}"): Doc("Delete a thread (the service's erasure)", status=204),
    ("POST", "/threads/{thread_id}/copy"): replace(_THREAD_ONLY, summary="Copy a thread"),
    ("GET", "/threads/{thread_id}/state"): Doc(
        "Get a thread's state", query=("subgraphs", "select")
    ),
    ("POST", "/threads/{thread_id}/state"): Doc("Update a thread's state"),
    ("POST", "/threads/{thread_id}/state/checkpoint"): Doc("Get a thread's state at a checkpoint"),
    ("GET", "/threads/{thread_id}/state/{checkpoint_id}"): Doc(
        "Get a thread's state at a checkpoint", query=("subgraphs", "select")
    ),
    ("GET", "/threads/{thread_id}/history"): Doc(
        "Get a thread's history", query=("limit", "before")
    ),
    ("POST", "/threads/{thread_id}/history"): Doc("Get a thread's history"),
    ("POST", "/threads/{thread_id}/runs"): Doc("Create a run"),
    ("GET", "/threads/{thread_id}/runs"): Doc(
        "List a thread's runs", query=("limit", "offset", "status")
    ),
    ("POST", "/threads/{thread_id}/runs/stream"): Doc("Create a run and stream it (SSE)"),
    ("POST", "/threads/{thread_id}/runs/wait"): Doc("Create a run and wait for its output"),
    ("GET", "/threads/{thread_id}/runs/{run_id}"): Doc("Get a run"),
    ("DELETE", "/threads/{thread_id}/runs/{run_id}"): Doc("Delete a finished run", status=204),
    ("POST", "/threads/{thread_id}/runs/{run_id}/cancel"): Doc(
        "Cancel a run", query=("wait", "action")
    ),
    ("GET", "/threads/{thread_id}/runs/{run_id}/join"): Doc("Wait for a run's output"),
    ("GET", "/threads/{thread_id}/runs/{run_id}/stream"): Doc(
        "Join a run's stream (SSE; Last-Event-ID resumes)",
        query=("stream_mode", "cancel_on_disconnect"),
    ),
    ("GET", "/threads/{thread_id}/runs/{run_id}/effects"): Doc(
        "A run's effect ledger (turnkeeper's own)"
    ),
    ("GET", "/threads/{thread_id}/runs/{run_id}/webhook"): Doc(
        "A run's webhook delivery and its attempts (turnkeeper's own)"
    ),
    ("POST", "/runs"): Doc("Create a thread-less run"),
    ("POST", "/runs/batch"): Doc("Create thread-less runs together"),
    ("POST", "/runs/cancel"): Doc(
        "Cancel runs: a thread's, by their ids, or every run of a status", query=("action",)
    ),
    ("POST", "/runs/stream"): Doc("Create a thread-less run and stream it (SSE)"),
    ("POST", "/runs/wait"): Doc("Create a thread-less run and wait for its output"),
    ("GET", "/info"): Doc("The server's version and features", response=INFO, tag="System"),
    ("GET", "/ok"): Doc("The server answers", response=OK, tag="System"),
}
