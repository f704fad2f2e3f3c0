"""Who sent a JSON-RPC request on NATS, and whether they may call its method.

When the service has tokens, every ``responses/*`` request carries the caller's
token in the NATS header ``Authorization: Bearer <token>``. The bridge asks the
service who that is (OperationsService/Introspect, with the bridge's own agent
token) and applies the service's answer: the methods the token's role may call,
and for an ``agent:<name>`` token, this agent only. Answers are cached for
:data:`CACHE_SECONDS`, so a revoked token is refused at the latest that long after
the service stopped accepting it. When the service runs without tokens, every
caller may call everything, as on gRPC.

Refusals are ``-32000`` errors whose ``data.code`` is ``UNAUTHENTICATED`` (no token,
or one the service does not accept) or ``PERMISSION_DENIED`` (a role without the
method), with a message that says which.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Final

from turnkeeper.agent.bridge.jsonrpc import SERVICE_ERROR, Request, RpcError
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import operations_pb2

HEADER: Final = "Authorization"
# How long the service's answer about one token is reused.
CACHE_SECONDS: Final = 2.0
# Tokens remembered at once; past it the cache starts over (a flood of made-up
# tokens costs Introspect calls, never memory).
MAX_CACHED: Final = 1024


def bearer_header(token: str) -> dict[str, str]:
    """The NATS headers that carry ``token``."""
    return {HEADER: f"Bearer {token}"}


def _refusal(code: str, message: str) -> RpcError:
    return RpcError(SERVICE_ERROR, message, {"code": code, "message": message})


def token_of(headers: Mapping[str, str]) -> str:
    """The bearer token in the headers; "" when there is none."""
    values = [v for k, v in headers.items() if k.lower() == HEADER.lower()]
    if not values:
        return ""
    scheme, _, token = values[0].strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise _refusal("UNAUTHENTICATED", f"the {HEADER} header must be 'Bearer <token>'")
    return token.strip()


class CallerCheck:
    """Checks the caller of each request against the service's answer for its token."""

    def __init__(
        self,
        client: AsyncTurnkeeperClient,
        agent: str,
        *,
        ttl: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.agent = agent
        self.ttl = ttl
        self.clock = clock
        self._cache: dict[str, tuple[float, operations_pb2.IntrospectResponse]] = {}

    async def who(self, token: str) -> operations_pb2.IntrospectResponse:
        # Keyed by a hash: the cache never holds a token itself.
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        answer = await self.client.introspect(operations_pb2.IntrospectRequest(token=token))
        if len(self._cache) >= MAX_CACHED:
            self._cache.clear()
        self._cache[key] = (now + self.ttl, answer)
        return answer

    async def check(self, request: Request) -> str | None:
        """Raises RpcError unless the caller may call the method. Returns who the
        caller is ("name (role)"), None when the service has no tokens."""
        token = token_of(request.headers)
        answer = await self.who(token)
        if not answer.authentication:
            return None
        method = request.method
        if not token:
            raise _refusal(
                "UNAUTHENTICATED",
                f"{method} needs a bearer token: the service has tokens; send the NATS "
                f"header '{HEADER}: Bearer <token>'",
            )
        if not answer.active:
            raise _refusal("UNAUTHENTICATED", "the bearer token is not one the service accepts")
        role = f"agent:{answer.agent}" if answer.role == "agent" else answer.role
        who = f"{answer.name} ({role})"
        if method not in answer.methods:
            may = ", ".join(answer.methods) or "none of the bridge's methods"
            raise _refusal(
                "PERMISSION_DENIED", f"token {who} may not call {method}; it may call {may}"
            )
        if answer.role == "agent" and answer.agent != self.agent:
            raise _refusal(
                "PERMISSION_DENIED",
                f"token {who} acts for agent {answer.agent!r}, not {self.agent!r}",
            )
        return who
