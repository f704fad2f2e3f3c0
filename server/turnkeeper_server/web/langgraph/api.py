"""What the LangGraph API's handlers share: the service's parts they call, who the
caller is, and the request body."""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from turnkeeper_server import limits as lim
from turnkeeper_server.engine import Engine
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal.threads import ThreadRecord
from turnkeeper_server.messaging.directory import AgentDirectory
from turnkeeper_server.operations import Operations
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller, TokenStore
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import MAX_BODY_BYTES, read_body
from turnkeeper_server.web.langgraph.custom_auth import CustomAuth
from turnkeeper_server.web.langgraph.errors import ApiError, not_found, problem
from turnkeeper_server.web.pump import Pump
from turnkeeper_server.web.relay import AgentRelay
from turnkeeper_server.webhooks.settings import WebhookSettings

# Creating a thread or changing its metadata: the roles that may start a turn
# through an agent. Reading threads, assistants and runs: every role's read right.
THREADS_WRITE: Final = auth.JSONRPC_CREATE
READ: Final = auth.JSONRPC_TURN_STATUS
# The gRPC rights a route needs beside them (the same table: security/auth.py).
CANCEL_RIGHT: Final = "/turnkeeper.v1.TurnService/CancelTurn"
DELETE_THREAD: Final = "/turnkeeper.v1.CheckpointService/DeleteThread"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Deps:
    engine: Engine
    # The operations beneath both surfaces (operations/): a run's cancel and delete,
    # a thread's erasure and copy, with their rights and audit, as gRPC's.
    operations: Operations
    relay: AgentRelay
    directory: AgentDirectory
    tokens: TokenStore | None
    # The SSE pump (web/pump.py): a run stream's quota, heartbeat, write timeout, and
    # its end when the caller's token is revoked, as a turn's event stream's.
    pump: Pump
    # The `auth` of a langgraph.json (custom_auth.py, end_users.py): end users within
    # the caller's role. None: no end users, as without an auth file on LangGraph's.
    custom_auth: CustomAuth | None = None
    # How a stream sends tokens unless it asks otherwise: "live" or "settled"
    # (stream.py; the service's --langgraph-stream).
    stream: str = "live"
    # Runs' webhooks: the secret file and allow-list a run's webhook is checked
    # against when it is created (webhooks.py).
    webhooks: WebhookSettings = dataclasses.field(default_factory=WebhookSettings)


Endpoint = Callable[[web.Request, "Caller | None", "Deps"], Awaitable[web.StreamResponse]]


def caller_of(
    request: web.Request, tokens: TokenStore | None, *, end_users: bool = False
) -> Caller | None:
    """The bearer token, or LangGraph's SDKs' `x-api-key` taken as one. With end
    users (a langgraph.json's auth), `Authorization` is theirs: the service's token
    is the `x-api-key`."""
    if tokens is None:
        return None
    key = request.headers.get("X-Api-Key")
    if key and (end_users or not request.headers.get("Authorization")):
        return tokens.authenticate([("authorization", f"Bearer {key}")])
    return web_auth.caller_of(request, tokens)


def require(caller: Caller | None, right: str) -> None:
    if caller is not None:
        with web_auth.acting_as(caller):
            auth.require_right(right)


def handler(fn: Endpoint, deps: Deps) -> Handler:
    """`fn` with the caller resolved and every exception answered as LangGraph's
    server answers it."""

    @functools.wraps(fn)
    async def handle(request: web.Request) -> web.StreamResponse:
        try:
            caller = caller_of(request, deps.tokens, end_users=deps.custom_auth is not None)
            return await fn(request, caller, deps)
        except Exception as exc:
            return problem(exc)

    return handle


_BODY: Final = web.RequestKey("turnkeeper_langgraph_body", object)
# An empty body, read as JSON.
EMPTY: Final = object()


async def json_of(request: web.Request) -> Any:
    """The JSON value sent (EMPTY for an empty body); read once, then kept with the
    request (an auth handler may have read it before the endpoint)."""
    if _BODY not in request:
        request[_BODY] = await _read_json(request)
    return request[_BODY]


async def body_of(request: web.Request) -> dict[str, Any]:
    """The JSON object sent (an empty body: {})."""
    body = await json_of(request)
    if body is EMPTY:
        request[_BODY] = body = {}  # kept: a handler may stamp it
    if not isinstance(body, dict):
        raise ApiError(422, "the body must be a JSON object")
    return body


async def list_body_of(request: web.Request) -> list[Any]:
    """The JSON array sent (an empty body: [])."""
    body = await json_of(request)
    if body is EMPTY:
        return []
    if not isinstance(body, list):
        raise ApiError(422, "the body must be a JSON array")
    return body


async def _read_json(request: web.Request) -> Any:
    """The body's JSON value, checked (EMPTY for an empty body)."""
    raw = await read_body(request)
    if not raw.strip():
        return EMPTY
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ApiError(422, f"the body is not UTF-8: {exc}") from None
    try:
        body = lim.check_json_text("the body", text, MAX_BODY_BYTES)
    except InvalidArgument as exc:
        raise ApiError(422, str(exc)) from None
    # A lone surrogate (only a \\uD800-\\uDFFF escape makes one) cannot be written
    # back as UTF-8: stored, it would break every answer that includes it.
    if _SURROGATE_ESCAPE.search(text) and _has_lone_surrogate(body):
        raise ApiError(422, "the body has a lone UTF-16 surrogate (\\uD800-\\uDFFF) in a string")
    return body


_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(value: Any) -> bool:
    if isinstance(value, str):
        return any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def field(
    body: dict[str, Any], name: str, kind: type | tuple[type, ...], default: Any = None
) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ApiError(422, f"{name} must be {_KIND_WORDS.get(names, names)}")
    return value


_KIND_WORDS: Final = {
    "dict": "an object",
    "str": "a string",
    "int": "a whole number",
    "list": "a list",
}


def limit_offset(body: dict[str, Any] | Any, *, default: int = 10) -> tuple[int, int]:
    try:
        limit = int(body.get("limit", default))
        offset = int(body.get("offset", 0))
    except (TypeError, ValueError, OverflowError):
        raise ApiError(422, "limit and offset must be whole numbers") from None
    if not 1 <= limit <= 1000 or offset < 0:
        raise ApiError(422, "limit must be from 1 to 1000 and offset not negative")
    return limit, offset


def agent_id(value: Any, what: str = "assistant_id") -> str:
    if not isinstance(value, str) or not value:
        raise ApiError(422, f"{what} must be a non-empty string")
    try:
        return lim.check_agent(value)
    except InvalidArgument as exc:
        raise ApiError(422, str(exc)) from None


def thread_id_of(request: web.Request) -> str:
    value = request.match_info["thread_id"]
    try:
        lim.check_id("thread_id", value)
    except InvalidArgument as exc:
        raise ApiError(422, str(exc)) from None
    return value


async def thread_or_404(deps: Deps, caller: Caller | None, thread_id: str) -> ThreadRecord:
    """The thread, if it exists and the caller may see it (auth.sees_thread: its
    owner's, operators'; NOT_FOUND for the others, as for a thread that is not)."""
    record = await deps.engine.threads.get(thread_id)
    if record is None or not sees(deps, caller, record):
        raise not_found(f"thread {thread_id}")
    return record


def sees(deps: Deps, caller: Caller | None, record: ThreadRecord) -> bool:
    return auth.sees_thread(
        caller, record.owner, lambda: deps.engine.turns.thread_agents(record.thread_id)
    )


def sees_owned(caller: Caller | None, owner: str) -> bool:
    """A cron or a run started later, by whom made it (`owner`, auth.identity):
    seen by its owner, operators and admins, as a thread nobody ran a turn on."""
    return auth.sees_thread(caller, owner, set)


def run_or_404(deps: Deps, caller: Caller | None, thread_id: str | None, run_id: str) -> TurnRecord:
    try:
        lim.check_id("run_id", run_id)
    except InvalidArgument as exc:
        raise ApiError(422, str(exc)) from None
    turn = deps.engine.turns.get(run_id)
    if turn is None or (thread_id is not None and turn.thread_id != thread_id):
        raise not_found(f"run {run_id}")
    if not sees_run(deps, caller, turn):
        raise not_found(f"run {run_id}")
    return turn


def sees_run(deps: Deps, caller: Caller | None, turn: TurnRecord) -> bool:
    """The service's one rule for reading a turn (auth.sees_turn), as a run's: an
    agent token its own agent's, a panel the runs of the threads it owns."""
    return caller is None or auth.sees_turn(
        caller, turn.agent, deps.operations.turns.owner(turn.thread_id)
    )


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=_dumps)


def _dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
