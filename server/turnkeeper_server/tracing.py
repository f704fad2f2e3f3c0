"""A SERVER span per RPC, continuing the caller's trace (W3C traceparent metadata).

Installed only while an OpenTelemetry SDK tracer provider is set when the server
starts (`turnkeeper._tracing`): with tracing off the service has no interceptor
here and pays nothing per call. Outermost of the interceptors, so a span covers
authentication and sees the status every refusal ends with.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

import grpc
from grpc import aio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace import Status, StatusCode
from turnkeeper import _tracing as tracing

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"
Context: TypeAlias = "aio.ServicerContext[Any, Any]"


def _finish(span: trace.Span, context: Context) -> None:
    code = context.code()
    if isinstance(code, grpc.StatusCode) and code != grpc.StatusCode.OK:
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        span.set_status(Status(StatusCode.ERROR, code.name))
    else:
        span.set_attribute("rpc.grpc.status_code", 0)


class ServerTracing(aio.ServerInterceptor):  # type: ignore[type-arg]
    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(details)
        if handler is None:
            return handler
        method: str = details.method.lstrip("/")
        carrier = {
            k: v if isinstance(v, str) else v.decode("latin-1")
            for k, v in details.invocation_metadata or ()
        }
        parent = propagate.extract(carrier)
        service, _, name = method.rpartition("/")
        attributes = {"rpc.system": "grpc", "rpc.service": service, "rpc.method": name}
        tracer = tracing.tracer()

        def start() -> tuple[trace.Span, object]:
            span = tracer.start_span(
                method, context=parent, kind=trace.SpanKind.SERVER, attributes=attributes
            )
            return span, otel_context.attach(trace.set_span_in_context(span, parent))

        if handler.response_streaming:
            inner_stream: Any = handler.unary_stream or handler.stream_stream

            async def stream(request: Any, context: Context) -> AsyncIterator[Any]:
                span, token = start()
                try:
                    # Closed with this wrapper however grpc ends it (decision 161).
                    async with contextlib.aclosing(inner_stream(request, context)) as responses:
                        async for response in responses:
                            yield response
                finally:
                    _finish(span, context)
                    span.end()
                    otel_context.detach(token)  # type: ignore[arg-type]

            make: Any = (
                grpc.unary_stream_rpc_method_handler
                if handler.unary_stream is not None
                else grpc.stream_stream_rpc_method_handler
            )
            behaviour: Any = stream
        else:
            inner_unary: Any = handler.unary_unary or handler.stream_unary

            async def unary(request: Any, context: Context) -> Any:
                span, token = start()
                try:
                    return await inner_unary(request, context)
                finally:
                    _finish(span, context)
                    span.end()
                    otel_context.detach(token)  # type: ignore[arg-type]

            make = (
                grpc.unary_unary_rpc_method_handler
                if handler.unary_unary is not None
                else grpc.stream_unary_rpc_method_handler
            )
            behaviour = unary
        traced: Handler = make(
            behaviour,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
        return traced
