"""OpenTelemetry traces across processes: agent client, service, NATS, bridge.

Off by default, and free when off: nothing is wrapped unless an OpenTelemetry SDK
tracer provider is installed when a channel or server starts (``active()``). A
process installs one either itself (any OpenTelemetry setup, a test's in-memory
exporter) or through :func:`configure_from_env`, which ``turnkeeper serve`` and the
bridge call: it reads the standard variables and does nothing unless
``OTEL_TRACES_EXPORTER`` (``otlp`` or ``console``) or an
``OTEL_EXPORTER_OTLP[_TRACES]_ENDPOINT`` is set (``OTEL_SDK_DISABLED=true`` wins).
The OTLP exporter is the ``otlp`` extra (``pip install 'turnkeeper[otlp]'``);
``OTEL_SERVICE_NAME`` and the exporter's own ``OTEL_EXPORTER_OTLP_*`` variables
apply as usual.

The W3C trace context (``traceparent``) rides in gRPC metadata from the clients to
the service, and in NATS headers on every JSON-RPC request (a session to a bridge,
the service's hand-off to a bridge), so one trace shows a turn from the caller
through the bridge, its graph's calls to the service, and back.

opentelemetry-api and -sdk are optional for the client (the ``tracing`` extra):
without them every function here is a no-op.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, Final

import grpc.aio

log = logging.getLogger(__name__)

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
except ImportError:  # the tracing extra is not installed
    trace = None  # type: ignore[assignment]

TRACER: Final = "turnkeeper"
_TRUE: Final = ("1", "true", "yes", "on")


def active() -> bool:
    """An SDK tracer provider is installed: spans are recorded somewhere."""
    if trace is None:
        return False
    provider = trace.get_tracer_provider()
    # The API's defaults (a proxy before any set, or the no-op provider) record nothing.
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def tracer() -> Any:
    assert trace is not None
    return trace.get_tracer(TRACER)


def enabled_by_env(env: Mapping[str, str] | None = None) -> bool:
    env = os.environ if env is None else env
    if (env.get("OTEL_SDK_DISABLED") or "").strip().lower() in _TRUE:
        return False
    exporter = (env.get("OTEL_TRACES_EXPORTER") or "").strip().lower()
    if exporter == "none":
        return False
    return bool(
        exporter
        or env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def configure_from_env(service_name: str, env: Mapping[str, str] | None = None) -> bool:
    """Install a tracer provider with the exporters the OTEL_* variables name; True
    when tracing is on afterwards. Leaves a provider the process set itself alone."""
    env = os.environ if env is None else env
    if active():
        return True
    if not enabled_by_env(env):
        return False
    if trace is None:
        raise RuntimeError(
            "OTEL_* variables ask for traces, but OpenTelemetry is not installed: "
            "pip install 'turnkeeper[tracing]' (and [otlp] for the OTLP exporter)"
        )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    resource = Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or service_name})
    provider = TracerProvider(resource=resource)
    names = [n.strip() for n in (env.get("OTEL_TRACES_EXPORTER") or "otlp").split(",")]
    for name in filter(None, names):
        exporter: Any
        if name == "console":
            exporter = ConsoleSpanExporter()
        elif name == "otlp":
            try:
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError:
                raise RuntimeError(
                    "OTEL_TRACES_EXPORTER=otlp needs the OTLP exporter: "
                    "pip install 'turnkeeper[otlp]'"
                ) from None
            exporter = OTLPSpanExporter()
        else:
            raise RuntimeError(f"OTEL_TRACES_EXPORTER {name!r}: turnkeeper knows otlp and console")
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    log.info("OpenTelemetry traces on (%s)", ", ".join(names))
    return True


def inject(carrier: MutableMapping[str, str]) -> None:
    """Add the current trace context (traceparent) to headers or metadata."""
    if trace is not None:
        propagate.inject(carrier)


@contextlib.contextmanager
def consumer_span(name: str, headers: Mapping[str, str] | None, **attributes: Any) -> Iterator[Any]:
    """A span for handling a message whose headers may carry a trace context; None
    (and no span) when tracing is off."""
    if not active():
        yield None
        return
    parent = propagate.extract(dict(headers or {}))
    token = otel_context.attach(parent)
    try:
        with tracer().start_as_current_span(
            name, kind=trace.SpanKind.SERVER, attributes=attributes
        ) as span:
            yield span
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def client_span(name: str, **attributes: Any) -> Iterator[dict[str, str] | None]:
    """A CLIENT span around an outgoing request; yields the headers that carry it
    (None when tracing is off)."""
    if not active():
        yield None
        return
    with tracer().start_as_current_span(name, kind=trace.SpanKind.CLIENT, attributes=attributes):
        headers: dict[str, str] = {}
        propagate.inject(headers)
        yield headers


def client_interceptors() -> list[Any]:
    """grpc.aio client interceptors that make a CLIENT span per RPC and send its
    context as metadata; none when tracing is off (no cost per call)."""
    # One object per kind of call: grpc.aio files an interceptor under the first
    # of the four kinds it is an instance of, so one class for all would trace the
    # unary calls only.
    return [_UnaryUnaryTracing(), _UnaryStreamTracing(), _StreamStreamTracing()] if active() else []


def _traced_details(details: Any, headers: dict[str, str]) -> Any:
    metadata = grpc.aio.Metadata(*(details.metadata or ()))
    for key, value in headers.items():
        metadata.add(key, value)
    return grpc.aio.ClientCallDetails(
        details.method, details.timeout, metadata, details.credentials, details.wait_for_ready
    )


def _start_client_span(details: Any) -> tuple[Any, dict[str, str]]:
    method = details.method.decode() if isinstance(details.method, bytes) else details.method
    service, _, name = method.lstrip("/").rpartition("/")
    span = tracer().start_span(
        method.lstrip("/"),
        kind=trace.SpanKind.CLIENT,
        attributes={"rpc.system": "grpc", "rpc.service": service, "rpc.method": name},
    )
    headers: dict[str, str] = {}
    propagate.inject(headers, context=trace.set_span_in_context(span))
    return span, headers


def _end_when_done(call: Any, span: Any) -> Any:
    call.add_done_callback(lambda _call: span.end())
    return call


class _UnaryUnaryTracing(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_unary(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        span, headers = _start_client_span(client_call_details)
        try:
            call = await continuation(_traced_details(client_call_details, headers), request)
        except BaseException:
            span.end()
            raise
        return _end_when_done(call, span)


class _UnaryStreamTracing(grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[type-arg]
    async def intercept_unary_stream(
        self, continuation: Any, client_call_details: Any, request: Any
    ) -> Any:
        span, headers = _start_client_span(client_call_details)
        try:
            call = await continuation(_traced_details(client_call_details, headers), request)
        except BaseException:
            span.end()
            raise
        return _end_when_done(call, span)


class _StreamStreamTracing(grpc.aio.StreamStreamClientInterceptor):  # type: ignore[type-arg]
    async def intercept_stream_stream(
        self, continuation: Any, client_call_details: Any, request_iterator: Any
    ) -> Any:
        # The checkpoint stream of a run: one span for the whole stream, its messages
        # are the server's to show.
        span, headers = _start_client_span(client_call_details)
        try:
            call = await continuation(
                _traced_details(client_call_details, headers), request_iterator
            )
        except BaseException:
            span.end()
            raise
        return _end_when_done(call, span)
