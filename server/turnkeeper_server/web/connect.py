"""TurnService over the Connect protocol's unary JSON form, for browsers.

    POST /turnkeeper.v1.TurnService/GetTurn
    Content-Type: application/json
    {"turnId": "t1"}                      ->  200 {"turn": {...}}
                                          ->  404 {"code": "not_found", "message": "..."}

Each route is one method of `BrowserMethods`, a typed protocol of the gRPC
servicer's methods that browsers may call (decision 272): the request is parsed by
protobuf's JSON mapping into the method's request type, handed to the servicer's own
method (so validation, rights and error mapping are the gRPC ones, not a copy), and
the response is the message's canonical JSON. Connect is the gRPC contract over
HTTP, so it dispatches per proto method rather than through the operations beneath
both surfaces (operations/): the servicer is that contract's one implementation. Only
BROWSER_METHODS are offered: the reads and the operator's actions; the executor's
writes stay on gRPC, and WatchTurn (a stream) is `sse.py`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Protocol, TypeVar

import grpc
from aiohttp import web
from google.protobuf import json_format
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import Message
from turnkeeper.v1 import turns_pb2

from turnkeeper_server.errors import (
    InvalidArgument,
    ResourceExhausted,
    TurnkeeperError,
    status_for,
)
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.operations.origin import Metadata, Origin
from turnkeeper_server.security.auth import TokenStore
from turnkeeper_server.web import auth as web_auth

log = logging.getLogger(__name__)

TURN_SERVICE: Final[ServiceDescriptor] = turns_pb2.DESCRIPTOR.services_by_name["TurnService"]

# Offered to browsers: every read, and the operator's actions. Rights are still
# checked per caller (auth.RIGHTS), exactly as on gRPC.
BROWSER_METHODS: Final = frozenset(
    {
        "TurnStatus",
        "GetTurn",
        "ListTurns",
        "ListEvents",
        "ListEffects",
        "ListAgents",
        "ResumeDetached",
        "Redrive",
        "CancelTurn",
    }
)

# Connect's error codes are gRPC's in snake case; each has one HTTP status.
HTTP_STATUS: Final[Mapping[grpc.StatusCode, int]] = {
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}

# Bodies beyond this are refused before parsing; ResumeDetached's value is the
# largest thing a browser sends, and the servicer applies its own limit to it.
MAX_BODY_BYTES: Final = 1 << 20
# How long a request's body may take to arrive once its headers have; the
# application's BODY_TIMEOUT (settings.http_body_timeout) overrides it.
BODY_TIMEOUT_SECONDS: Final = 30.0
BODY_TIMEOUT: Final = web.AppKey("body_timeout", float)


class BodyTooLarge(ResourceExhausted):
    """A request body over the limit: 413, whether it said its length or not."""

    http_status = 413


class BodyTimeout(TurnkeeperError):
    """The body did not arrive in time: 408."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED
    http_status = 408


async def read_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The whole body, however it arrives (several TCP writes, chunked), up to
    `limit` bytes; BodyTooLarge past it, BodyTimeout when it takes longer than the
    application's BODY_TIMEOUT.

    `request.content.read(n)` answers with what is buffered so far, so it is never
    the whole of a body larger than one read; this reads until the end of the body.
    """
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLarge(f"the body is over {limit} bytes ({request.content_length})")
    timeout = request.config_dict.get(BODY_TIMEOUT, BODY_TIMEOUT_SECONDS)
    parts: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            while True:
                chunk = await request.content.readany()
                if not chunk:
                    break
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge(f"the body is over {limit} bytes")
                parts.append(chunk)
    except TimeoutError:
        raise BodyTimeout(
            f"the request body did not arrive within {timeout:g} s of its headers"
        ) from None
    return b"".join(parts)


def connect_code(code: grpc.StatusCode) -> str:
    """`not_found` for NOT_FOUND: Connect's spelling of a gRPC code."""
    return str(code.name).lower()


def error_response(exc: BaseException) -> web.Response:
    """A Connect error: `{code, message}` with the code's HTTP status."""
    code, message = status_for(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.error("HTTP request failed unexpectedly", exc_info=exc)
    status = getattr(exc, "http_status", None) or HTTP_STATUS.get(code, 500)
    return web.json_response({"code": connect_code(code), "message": message}, status=status)


def to_json(message: Message) -> dict[str, Any]:
    """Canonical protobuf JSON (lowerCamelCase names, enums by name), with fields at
    their defaults included so a page need not know proto3's defaults."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True)


Req = TypeVar("Req", bound=Message)
Resp = TypeVar("Resp", bound=Message)


def parse(raw: bytes, request_type: type[Req]) -> Req:
    """The body as the method's request; INVALID_ARGUMENT saying what is wrong."""
    request = request_type()
    if not raw.strip():
        return request
    try:
        json_format.Parse(raw.decode("utf-8"), request)
    except (json_format.ParseError, UnicodeDecodeError) as exc:
        raise InvalidArgument(
            f"the body is not a {request_type.DESCRIPTOR.full_name} in JSON: {exc}"
        ) from None
    return request


class HttpContext:
    """What an operation reads of a gRPC context (operations/origin.py), for a call
    that came over HTTP: the peer (quota keys when authentication is off), and no
    metadata (a browser passes on no caller assertion)."""

    def __init__(self, request: web.Request) -> None:
        self.request = request

    def peer(self) -> str:
        remote = self.request.remote or "unknown"
        kind = "ipv6" if ":" in remote else "ipv4"
        return f"{kind}:{remote}:0"

    def invocation_metadata(self) -> Metadata | None:
        return None


class BrowserMethods(Protocol):
    """The methods of TurnService that browsers may call (BROWSER_METHODS), as the
    gRPC servicer (rpc/turn_service.py) has them."""

    async def TurnStatus(
        self, request: turns_pb2.TurnStatusRequest, context: Origin
    ) -> turns_pb2.TurnStatusResponse: ...

    async def GetTurn(
        self, request: turns_pb2.GetTurnRequest, context: Origin
    ) -> turns_pb2.GetTurnResponse: ...

    async def ListTurns(
        self, request: turns_pb2.ListTurnsRequest, context: Origin
    ) -> turns_pb2.ListTurnsResponse: ...

    async def ListEvents(
        self, request: turns_pb2.ListEventsRequest, context: Origin
    ) -> turns_pb2.ListEventsResponse: ...

    async def ListEffects(
        self, request: turns_pb2.ListEffectsRequest, context: Origin
    ) -> turns_pb2.ListEffectsResponse: ...

    async def ListAgents(
        self, request: turns_pb2.ListAgentsRequest, context: Origin
    ) -> turns_pb2.ListAgentsResponse: ...

    async def ResumeDetached(
        self, request: turns_pb2.ResumeDetachedRequest, context: Origin
    ) -> turns_pb2.ResumeDetachedResponse: ...

    async def Redrive(
        self, request: turns_pb2.RedriveRequest, context: Origin
    ) -> turns_pb2.RedriveResponse: ...

    async def CancelTurn(
        self, request: turns_pb2.CancelTurnRequest, context: Origin
    ) -> turns_pb2.CancelTurnResponse: ...


class Route(Protocol):
    """One Connect route: a method, its request type, and the call that answers it."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def request_type(self) -> type[Message]: ...

    @property
    def call(self) -> Callable[..., Awaitable[Message]]: ...

    def bind(self, raw: bytes) -> Callable[[Origin], Awaitable[Message]]:
        """The call of the method with the request body parsed (INVALID_ARGUMENT
        when it is not the method's request)."""
        ...


@dataclass(frozen=True)
class MethodRoute(Generic[Req, Resp]):
    name: str
    path: str
    request_type: type[Req]
    call: Callable[[Req, Origin], Awaitable[Resp]]

    def bind(self, raw: bytes) -> Callable[[Origin], Awaitable[Resp]]:
        return functools.partial(self.call, parse(raw, self.request_type))


def method_route(
    service: ServiceDescriptor,
    request_type: type[Req],
    call: Callable[[Req, Origin], Awaitable[Resp]],
) -> Route:
    """The route of the unary method of `service` whose request is `request_type`."""
    name = request_type.DESCRIPTOR.name.removesuffix("Request")
    method = service.methods_by_name[name]
    if method.client_streaming or method.server_streaming:
        raise ValueError(f"{name} streams: Connect's unary JSON form cannot carry it")
    if method.input_type.full_name != request_type.DESCRIPTOR.full_name:
        raise ValueError(f"{name} takes {method.input_type.full_name}")
    return MethodRoute(name, f"/{service.full_name}/{name}", request_type, call)


def routes(methods: BrowserMethods, service: ServiceDescriptor = TURN_SERVICE) -> list[Route]:
    """One route per method of BROWSER_METHODS, bound to `methods`' method of the same
    name, and checked against `service`'s descriptor."""
    out = [
        method_route(service, turns_pb2.TurnStatusRequest, methods.TurnStatus),
        method_route(service, turns_pb2.GetTurnRequest, methods.GetTurn),
        method_route(service, turns_pb2.ListTurnsRequest, methods.ListTurns),
        method_route(service, turns_pb2.ListEventsRequest, methods.ListEvents),
        method_route(service, turns_pb2.ListEffectsRequest, methods.ListEffects),
        method_route(service, turns_pb2.ListAgentsRequest, methods.ListAgents),
        method_route(service, turns_pb2.ResumeDetachedRequest, methods.ResumeDetached),
        method_route(service, turns_pb2.RedriveRequest, methods.Redrive),
        method_route(service, turns_pb2.CancelTurnRequest, methods.CancelTurn),
    ]
    assert {r.name for r in out} == BROWSER_METHODS, "BROWSER_METHODS and the routes differ"
    return out


class ConnectHandler:
    """The aiohttp handler of one route."""

    def __init__(self, route: Route, tokens: TokenStore | None, metrics: Metrics) -> None:
        self.route = route
        self.tokens = tokens
        self.metrics = metrics

    async def __call__(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        code = grpc.StatusCode.OK
        try:
            response = await self._handle(request)
        except Exception as exc:
            code = status_for(exc)[0]
            if not isinstance(exc, TurnkeeperError) and code != grpc.StatusCode.INTERNAL:
                log.warning("%s over HTTP failed: %s", self.route.name, exc)
            return error_response(exc)
        finally:
            self.metrics.rpcs.labels(method=self.route.name, code=code.name).inc()
            self.metrics.rpc_seconds.labels(method=self.route.name, code=code.name).observe(
                time.perf_counter() - started
            )
        return web.json_response(to_json(response))

    async def _handle(self, request: web.Request) -> Message:
        content_type = request.content_type
        if content_type != "application/json":
            # A cross-site form or text/plain "simple request" gets no further.
            raise InvalidArgument(
                f"send the request as Content-Type application/json, not {content_type!r}"
            )
        caller = web_auth.caller_of(request, self.tokens)
        call = self.route.bind(await read_body(request))
        with web_auth.acting_as(caller):
            web_auth.require(self.route.name)
            return await call(HttpContext(request))


def add_routes(
    app: web.Application, methods: BrowserMethods, tokens: TokenStore | None, metrics: Metrics
) -> list[str]:
    """Adds the Connect routes; returns their paths."""
    paths = []
    for route in routes(methods):
        # The bound method: aiohttp wants a coroutine function, not a callable object.
        app.router.add_post(route.path, ConnectHandler(route, tokens, metrics).__call__)
        paths.append(route.path)
    return paths
