"""The service's side of caller assertions (turnkeeper._caller_assertion): it issues
one per request to an agent, in place of the caller's token, and reads back the ones
a bridge passes on when it acts for its caller.

Issuing checks what the relay checks: the method is one a caller may send to a
bridge, the caller's role may call it, and an agent token reaches its own agent
only. The keys are those of the agent's tokens in the tokens file (one signature
each); an agent with no token there has no bridge that could verify anything, so
nothing is issued for it.
"""

from __future__ import annotations

import time

from turnkeeper._caller_assertion import (
    LIFETIME,
    AssertionRefused,
    CallerAssertion,
    key_of,
    sign,
    verify,
)

from turnkeeper_server.errors import PermissionDenied, Unauthenticated, WrongState
from turnkeeper_server.security import auth

__all__ = ["AssertionRefused", "Assertions", "CallerAssertion"]


class Assertions:
    """Issues and reads back caller assertions with the keys of `tokens`."""

    def __init__(self, tokens: auth.TokenStore) -> None:
        self.tokens = tokens

    def _keys(self, agent: str) -> list[bytes]:
        return [
            key_of(digest)
            for digest, caller in self.tokens.names().items()
            if caller.role == auth.AGENT and caller.agent == agent
        ]

    def issue(
        self,
        caller: auth.Caller,
        agent: str,
        method: str,
        request_id: str,
        *,
        granted: bool = False,
    ) -> tuple[str, float]:
        """(header value, expiry) of an assertion that `caller` sends `method` to
        `agent` in request `request_id`. `granted`: the service checked this one
        request's right itself (a thread's owner editing its state where the
        deployment allows it, decision 309), so the method is asserted whatever the
        role; never set from what a caller asks."""
        if method not in auth.JSONRPC_METHODS:
            raise PermissionDenied(
                f"{method!r} is not a method a caller sends to an agent; those are "
                f"{', '.join(auth.JSONRPC_METHODS)}"
            )
        if granted:
            auth.require_jsonrpc(caller, agent, auth.JSONRPC_TURN_STATUS)
        else:
            auth.require_jsonrpc(caller, agent, method)
        methods = auth.jsonrpc_methods(caller.role)
        if method not in methods:
            methods.append(method)
        keys = self._keys(agent)
        if not keys:
            raise WrongState(
                f"agent {agent!r} has no token in the tokens file, so none of its replicas "
                "could verify a caller: add an agent:" + agent + " token"
            )
        expires = time.time() + LIFETIME
        assertion = CallerAssertion(
            agent=agent,
            method=method,
            request_id=request_id,
            name=caller.name,
            role=caller.role,
            caller_agent=caller.agent or "",
            methods=tuple(methods),
            expires_at=expires,
        )
        return sign(assertion, keys), expires

    def read(self, value: str, agent: str, method: str) -> CallerAssertion:
        """The assertion a bridge of `agent` passed on for its caller's `method`
        request; Unauthenticated if it is not one this service issued for that."""
        try:
            return verify(value, self._keys(agent), agent=agent, method=method)
        except AssertionRefused as exc:
            raise Unauthenticated(str(exc)) from None
