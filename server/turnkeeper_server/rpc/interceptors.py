"""The one server interceptor that turns exceptions into status codes and counts RPCs.

Servicers raise domain errors (`errors.py`); this wraps every handler, maps what
escapes with `errors.status_for`, aborts with that code, and records the RPC's
code and latency. An unexpected exception is logged with its traceback and
answered INTERNAL without leaking internals into the message.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from grpc import aio

from turnkeeper_server.errors import InvalidArgument, TurnkeeperError, status_for
from turnkeeper_server.metrics import Metrics

log = logging.getLogger(__name__)


# Strings: these grpc types are generic in the type stubs only.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "aio.ServicerContext[Any, Any]"


class _Malformed:
    """What a request that does not parse becomes; the handler answers INVALID_ARGUMENT
    (grpc itself would answer UNKNOWN, and only after logging a traceback)."""

    def __init__(self, exc: Exception) -> None:
        self.message = f"the request is not a valid protobuf message: {exc}"


def _tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    if deserializer is None:
        return None

    def parse(raw: bytes) -> Any:
        try:
            return deserializer(raw)
        except Exception as exc:
            return _Malformed(exc)

    return parse


async def _parsed(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
    async for request in requests:
        if isinstance(request, _Malformed):
            raise InvalidArgument(request.message)
        yield request


class ErrorsAndMetrics(aio.ServerInterceptor):  # type: ignore[type-arg]
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        # Per full method name: the inner handler last seen and its wrapper. The
        # servicers' handlers are the same objects call after call, so the wrapper is
        # built once; a handler made per call (Authenticate's) is wrapped per call.
        self._wrapped: dict[str, tuple[Handler, Handler]] = {}
        # Per (method, code): the metric children (`labels()` looks them up under a lock).
        self._children: dict[tuple[str, grpc.StatusCode], tuple[Any, Any]] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(details)
        if handler is None:
            return handler
        cached = self._wrapped.get(details.method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        wrapped = self._wrap(details.method.rsplit("/", 1)[-1], handler)
        if len(self._wrapped) < 1024:  # bounded: method names come from clients
            self._wrapped[details.method] = (handler, wrapped)
        return wrapped

    def _wrap(self, method: str, handler: Handler) -> Handler:
        if handler.unary_unary is not None:
            return grpc.unary_unary_rpc_method_handler(
                self._unary(method, handler.unary_unary),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._stream(method, handler.unary_stream),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        # Request streams (CheckpointStream, server reflection): mapped and counted
        # too; a message that does not parse ends the call with INVALID_ARGUMENT
        # when the handler reaches it (_parsed).
        if handler.stream_unary is not None:
            return grpc.stream_unary_rpc_method_handler(
                self._unary(method, handler.stream_unary),
                request_deserializer=handler.request_deserializer,
                response_serializer=handler.response_serializer,
            )
        if handler.stream_stream is not None:
            return grpc.stream_stream_rpc_method_handler(
                self._stream(method, handler.stream_stream),
                request_deserializer=_tolerant(handler.request_deserializer),
                response_serializer=handler.response_serializer,
            )
        return handler

    async def _fail(self, context: Context, method: str, exc: Exception) -> None:
        code, message = status_for(exc)
        if code == grpc.StatusCode.INTERNAL:
            log.error("%s failed unexpectedly", method, exc_info=exc)
        elif not isinstance(exc, TurnkeeperError):
            log.warning("%s failed: %s", method, exc)
        await context.abort(code, message)

    def _record(self, method: str, code: grpc.StatusCode, started: float) -> None:
        children = self._children.get((method, code))
        if children is None:
            children = self._children[(method, code)] = (
                self.metrics.rpcs.labels(method=method, code=code.name),
                self.metrics.rpc_seconds.labels(method=method, code=code.name),
            )
        children[0].inc()
        children[1].observe(time.perf_counter() - started)

    def _unary(self, method: str, inner: Any) -> Callable[[Any, Context], Awaitable[Any]]:
        async def handle(request: Any, context: Context) -> Any:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                if isinstance(request, _Malformed):
                    raise InvalidArgument(request.message)
                return await inner(request, context)
            except aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as exc:
                code = status_for(exc)[0]
                await self._fail(context, method, exc)
            finally:
                self._record(method, code, started)

        return handle

    def _stream(self, method: str, inner: Any) -> Callable[[Any, Context], AsyncIterator[Any]]:
        async def handle(request: Any, context: Context) -> AsyncIterator[Any]:
            started = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                if isinstance(request, _Malformed):
                    raise InvalidArgument(request.message)
                if hasattr(request, "__aiter__"):
                    request = _parsed(request)
                # Closed with this wrapper however grpc ends it (decision 161).
                async with contextlib.aclosing(inner(request, context)) as responses:
                    async for response in responses:
                        yield response
            except aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as exc:
                code = status_for(exc)[0]
                await self._fail(context, method, exc)
            finally:
                self._record(method, code, started)

        return handle
