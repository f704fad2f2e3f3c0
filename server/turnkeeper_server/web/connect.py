"""TurnService over the Connect protocol's unary JSON form, for browsers.

    POST /turnkeeper.v1.TurnService/GetTurn
    Content-Type: application/json
    {"turnId": "t1"}                      ->  200 {"turn": {...}}
                                          ->  404 {"code": "not_found", "message": "..."}

The routes are generated from the service descriptor in the generated stubs: the
request is parsed by protobuf's JSON mapping into the method's request type, handed
to the gRPC servicer's own method (so validation, rights and error mapping are the
gRPC ones, not a copy), and the response is the message's canonical JSON. Only
BROWSER_METHODS are offered: the reads and the operator's actions; the executor's
writes stay on gRPC, and WatchTurn (a stream) is `sse.py`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import grpc
from aiohttp import web
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import MethodDescriptor, ServiceDescriptor
from google.protobuf.message import Message
from turnkeeper.v1 import turns_pb2

from turnkeeper_server.errors import (
    InvalidArgument,
    ResourceExhausted,
    TurnkeeperError,
    status_for,
)
from turnkeeper_server.metrics import Metrics
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


def parse(raw: bytes, request_type: type[Message]) -> Message:
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
    """What the servicer reads of a gRPC context, for a call that came over HTTP:
    the peer (quota keys when authentication is off)."""

    def __init__(self, request: web.Request) -> None:
        self.request = request

    def peer(self) -> str:
        remote = self.request.remote or "unknown"
        kind = "ipv6" if ":" in remote else "ipv4"
        return f"{kind}:{remote}:0"


@dataclass(frozen=True)
class Route:
    name: str
    path: str
    request_type: type[Message]
    call: Callable[[Message, Any], Awaitable[Message]]


def routes(servicer: object, service: ServiceDescriptor = TURN_SERVICE) -> list[Route]:
    """One route per unary method of `service` in BROWSER_METHODS, bound to
    `servicer`'s method of the same name."""
    out = []
    method: MethodDescriptor
    for method in service.methods:
        if method.name not in BROWSER_METHODS:
            continue
        if method.client_streaming or method.server_streaming:
            continue
        out.append(
            Route(
                name=method.name,
                path=f"/{service.full_name}/{method.name}",
                request_type=message_factory.GetMessageClass(method.input_type),
                call=getattr(servicer, method.name),
            )
        )
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
        raw = await read_body(request)
        message = parse(raw, self.route.request_type)
        with web_auth.acting_as(caller):
            web_auth.require(self.route.name)
            return await self.route.call(message, HttpContext(request))


def add_routes(
    app: web.Application, servicer: object, tokens: TokenStore | None, metrics: Metrics
) -> list[str]:
    """Adds the Connect routes; returns their paths."""
    paths = []
    for route in routes(servicer):
        # The bound method: aiohttp wants a coroutine function, not a callable object.
        app.router.add_post(route.path, ConnectHandler(route, tokens, metrics).__call__)
        paths.append(route.path)
    return paths
