"""The interceptor that checks every call's bearer token and the method's right
(auth.py holds the tokens, the roles and the table of rights), runs the handler
with the caller in context, and ends a response stream whose token is revoked."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias, cast

import grpc
from grpc import aio

from turnkeeper_server.errors import TurnkeeperError, Unauthenticated
from turnkeeper_server.security.auth import (
    _CALLER,
    HEALTH_PREFIX,
    REFLECTION_PREFIXES,
    Caller,
    TokenStore,
    _as_current,
    require_right,
)
from turnkeeper_server.security.streams import OpenStreams

log = logging.getLogger(__name__)


def _discard(_raw: bytes) -> None:
    """A refused call's request is never parsed."""
    return None


# A string: grpc.RpcMethodHandler is generic in the type stubs only.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"


def _refusal(handler: Handler, exc: TurnkeeperError) -> Handler:
    """A handler that raises `exc` (ErrorsAndMetrics maps it) without reading the
    request: it takes the request as a stream it never iterates, so a refused call's
    message is never received whole (HTTP/2 flow control stops its sender at the
    stream's window), however large the message says it is (decision 274)."""

    async def unary(_requests: Any, _context: Any) -> Any:
        raise exc

    async def stream(_requests: Any, _context: Any) -> AsyncIterator[Any]:
        raise exc
        yield  # pragma: no cover - makes this an async generator

    kind: Any = (
        grpc.stream_stream_rpc_method_handler
        if handler.response_streaming
        else grpc.stream_unary_rpc_method_handler
    )
    return cast(
        Handler,
        kind(
            stream if handler.response_streaming else unary,
            request_deserializer=_discard,
            response_serializer=handler.response_serializer,
        ),
    )


def _revoked() -> Unauthenticated:
    return Unauthenticated("the bearer token was revoked; this stream is closed")


def _as_caller(handler: Handler, caller: Caller, streams: OpenStreams) -> Handler:
    """The same handler, run with `caller` in the context var; a response stream
    ends with UNAUTHENTICATED once the caller's token is revoked."""
    make: Any
    behaviour: Callable[..., Any]
    if handler.response_streaming:
        # grpc.aio handlers: async generators for response streams, else coroutines.
        inner_stream: Any = handler.stream_stream or handler.unary_stream

        async def stream(request: Any, context: Any) -> AsyncIterator[Any]:
            token = _CALLER.set(caller)
            try:
                # Closed with this wrapper however grpc ends it (decision 161).
                async with contextlib.aclosing(inner_stream(request, context)) as responses:
                    with streams.hold(caller) as entry:
                        while True:
                            if entry.revoked:
                                raise _revoked()
                            entry.waiting = True
                            try:
                                response = await anext(responses)
                            except StopAsyncIteration:
                                return
                            except asyncio.CancelledError:
                                if not entry.revoked or entry.task is None:
                                    raise
                                entry.task.uncancel()
                                raise _revoked() from None
                            finally:
                                entry.waiting = False
                            yield response
            finally:
                # An abandoned generator may be closed from another context.
                with contextlib.suppress(ValueError):
                    _CALLER.reset(token)

        make = (
            grpc.stream_stream_rpc_method_handler
            if handler.request_streaming
            else grpc.unary_stream_rpc_method_handler
        )
        behaviour = stream
    else:
        inner_unary: Any = handler.stream_unary or handler.unary_unary

        async def unary(request: Any, context: Any) -> Any:
            token = _CALLER.set(caller)
            try:
                return await inner_unary(request, context)
            finally:
                _CALLER.reset(token)

        make = (
            grpc.stream_unary_rpc_method_handler
            if handler.request_streaming
            else grpc.unary_unary_rpc_method_handler
        )
        behaviour = unary
    return cast(
        Handler,
        make(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        ),
    )


class Authenticate(aio.ServerInterceptor):  # type: ignore[type-arg]
    """Checks the bearer token and the method's right before the request is parsed.

    Installed inside ErrorsAndMetrics, so refusals are mapped and counted like any
    other error. The health service is open to probes; reflection (when enabled)
    needs a token of any role.
    """

    def __init__(self, tokens: TokenStore, streams: OpenStreams | None = None) -> None:
        self.tokens = tokens
        self.streams = streams if streams is not None else OpenStreams()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or method.startswith(HEALTH_PREFIX):
            return handler
        try:
            caller = self.tokens.authenticate(details.invocation_metadata)
            if not method.startswith(REFLECTION_PREFIXES):
                with _as_current(caller):
                    require_right(method)
        except TurnkeeperError as exc:
            log.info("refused %s: %s", method, exc)
            return _refusal(handler, exc)
        return _as_caller(handler, caller, self.streams)
