"""Who sent a JSON-RPC request on NATS, and whether they may call its method.

When the service has tokens, a caller's bearer token never reaches an agent: every
``responses/*`` request carries instead, in the NATS header ``Turnkeeper-Assertion``,
a caller assertion the service signed for this agent, this method and this request
id (:mod:`turnkeeper._caller_assertion`). The bridge verifies it with its own token
(no call to the service), takes each request id once, and applies what it says:
the methods the caller's role may call. The bridge passes the assertion on with
the calls it makes for the caller (StartTurn, ResumeDetached, CancelTurn), so the
service applies the caller's rights as well as the agent's and names the caller in
its audit log.

A bridge without a token talks to a service without tokens: every caller may call
everything, as on gRPC.

Refusals are ``-32000`` errors whose ``data.code`` is ``UNAUTHENTICATED`` (no
assertion, or one that is not valid here) or ``PERMISSION_DENIED`` (a role without
the method), with a message that says which.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Final

from turnkeeper._caller_assertion import (
    HEADER,
    AssertionRefused,
    CallerAssertion,
    ReplayGuard,
    key_of,
    token_digest,
    verify,
)
from turnkeeper.agent.bridge._jsonrpc import SERVICE_ERROR, Request, RpcError

__all__ = ["HEADER", "CallerCheck", "assertion_of"]

# A header with a bearer token: refused, so that a caller who still sends one learns
# that the token is not to be sent to agents.
_AUTHORIZATION: Final = "authorization"


def _refusal(code: str, message: str) -> RpcError:
    return RpcError(SERVICE_ERROR, message, {"code": code, "message": message})


def assertion_of(headers: Mapping[str, str]) -> str:
    """The Turnkeeper-Assertion header's value; "" when there is none."""
    for key, value in headers.items():
        if key.lower() == HEADER.lower():
            return value.strip()
    return ""


class CallerCheck:
    """Verifies each request's caller assertion with this agent's own token."""

    def __init__(self, token: str, agent: str, *, clock: Callable[[], float] = time.time) -> None:
        self.agent = agent
        self.clock = clock
        self._keys = [key_of(token_digest(token))]
        self._replays = ReplayGuard()

    def check(self, request: Request) -> CallerAssertion:
        """Raises RpcError unless the request carries a valid assertion whose caller
        may call the method; returns the assertion."""
        value = assertion_of(request.headers)
        if not value:
            bearer = any(k.lower() == _AUTHORIZATION for k in request.headers)
            raise _refusal(
                "UNAUTHENTICATED",
                f"{request.method} needs a caller assertion in the NATS header {HEADER}: "
                "the service issues one per request (POST /v1/agents/<agent>/rpc relays "
                "with one; OperationsService/IssueAssertion gives one)"
                + ("; a bearer token is never sent to an agent" if bearer else ""),
            )
        now = self.clock()
        try:
            assertion = verify(
                value,
                self._keys,
                agent=self.agent,
                method=request.method,
                request_id=str(request.id),
                now=now,
            )
            self._replays.take(assertion, now)
        except AssertionRefused as exc:
            raise _refusal("UNAUTHENTICATED", str(exc)) from None
        if request.method not in assertion.methods:
            may = ", ".join(assertion.methods) or "none of the bridge's methods"
            raise _refusal(
                "PERMISSION_DENIED",
                f"{assertion.who} may not call {request.method}; it may call {may}",
            )
        return assertion
