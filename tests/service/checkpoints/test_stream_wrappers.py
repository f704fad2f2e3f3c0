"""The interceptors that wrap a response stream close the handler under them.

When a caller leaves while grpc is sending a frame, grpc does not cancel the handler:
it stops iterating the outermost wrapper and closes it at its `yield`. Each wrapper
must then close what it wraps in the same step, so the handler's own cleanup (a
stream quota, the engine's watch, a span) runs at once and not whenever the garbage
collector gets to it (decision 161)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
from grpc import aio
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.rpc.interceptors import ErrorsAndMetrics
from turnkeeper_server.security.auth import ADMIN, Caller, TokenStore, token_hash
from turnkeeper_server.security.authenticate import Authenticate
from turnkeeper_server.tracing import ServerTracing

METHOD = "/turnkeeper.v1.TurnService/WatchTurn"
TOKEN = "a-test-token"


@dataclass
class Details:
    method: str = METHOD
    invocation_metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {TOKEN}"),)


class Context:
    def code(self) -> None:
        return None

    def peer(self) -> str:
        return "ipv4:127.0.0.1:50000"


@dataclass
class Handler:
    """A response stream that says whether it is still open."""

    frames: int = 3
    events: list[str] = field(default_factory=list)

    async def stream(self, _request: Any, _context: Any) -> AsyncIterator[int]:
        self.events.append("open")
        try:
            for n in range(self.frames):
                yield n
        finally:
            self.events.append("closed")


def errors_and_metrics() -> aio.ServerInterceptor:  # type: ignore[type-arg]
    return ErrorsAndMetrics(Metrics())


def authenticate() -> aio.ServerInterceptor:  # type: ignore[type-arg]
    caller = Caller(name="ops", role=ADMIN, digest=token_hash(TOKEN))
    return Authenticate(TokenStore({caller.digest: caller}))


INTERCEPTORS: dict[str, Callable[[], aio.ServerInterceptor]] = {  # type: ignore[type-arg]
    "errors_and_metrics": errors_and_metrics,
    "authenticate": authenticate,
    "tracing": ServerTracing,
}


@pytest.mark.parametrize("make", INTERCEPTORS.values(), ids=INTERCEPTORS.keys())
async def test_a_wrapper_closed_at_a_yield_closes_the_handler_under_it(
    make: Callable[[], aio.ServerInterceptor],  # type: ignore[type-arg]
) -> None:
    inner = Handler()

    async def continuation(_details: Any) -> grpc.RpcMethodHandler[Any, Any]:
        return grpc.unary_stream_rpc_method_handler(inner.stream)

    wrapped = await make().intercept_service(continuation, Details())  # type: ignore[arg-type]
    behaviour: Any = wrapped.unary_stream
    stream = behaviour(object(), Context())
    assert await anext(stream) == 0
    assert inner.events == ["open"]
    await stream.aclose()
    # No await in between: nothing else on the loop ran.
    assert inner.events == ["open", "closed"]
