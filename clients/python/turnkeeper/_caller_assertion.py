"""Caller assertions: who sent a JSON-RPC request to an agent, said by the service.

A caller's bearer token never leaves the service. When the service has tokens, a
request on NATS to an agent's bridge carries instead, in the header
``Turnkeeper-Assertion``, a statement the service signed for that one request: the
agent it is for, the method, the request's id, who the caller is (token name and
role) and which of the bridge's methods that role may call, and when it expires
(:data:`LIFETIME` after issue). The service issues one when it relays a request
(``POST /v1/agents/{agent}/rpc``) and on request (``OperationsService/IssueAssertion``,
what a panel talking NATS itself asks before each request).

It is signed with HMAC-SHA256 under a key per token of the agent::

    key = HMAC-SHA256(key=SHA-256(agent token), msg="turnkeeper caller assertion v1")

The service knows the SHA-256 of every token (the tokens file holds those), and a
bridge knows its own token, so every replica verifies with what it already has: no
key is handed out, a token rotated in the tokens file is signed for from the next
reload, and a revoked one is not. An assertion carries one signature per token of
the agent, each named by a key id derived from its key (which says nothing of the
token). Another agent cannot make one (it holds no key of this agent), a copy is
good only for its request id on its agent until it expires, and a bridge takes each
request id once (:class:`ReplayGuard`).

Pure standard library: the client core, the bridge and the service share it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

HEADER: Final = "Turnkeeper-Assertion"
# gRPC metadata key under which a bridge passes its caller's assertion on to the
# service (the service then applies the caller's rights as well as the agent's).
METADATA: Final = "turnkeeper-caller-assertion"
# Seconds an assertion is good for after the service issued it.
LIFETIME: Final = 60.0
# Clocks of the service and an agent's host may disagree by this much.
SKEW: Final = 30.0
_KEY_LABEL: Final = b"turnkeeper caller assertion v1"
_KID_LABEL: Final = b"turnkeeper assertion key id v1"
# The longest header value taken: a payload of a few hundred bytes and a signature
# per token of the agent.
MAX_LENGTH: Final = 8192


class AssertionRefused(ValueError):
    """The assertion is missing, malformed, not for this request, expired, used
    already, or not signed with this agent's key. The message says which."""


@dataclass(frozen=True)
class CallerAssertion:
    agent: str
    method: str
    request_id: str
    # The caller's token name and role (agent, panel, operator, admin); for an
    # agent token, the agent it acts for.
    name: str
    role: str
    caller_agent: str
    # The bridge methods the caller's role may call.
    methods: tuple[str, ...]
    expires_at: float

    @property
    def who(self) -> str:
        """The caller as the audit log names it: "alice (operator)"."""
        role = f"agent:{self.caller_agent}" if self.role == "agent" else self.role
        return f"{self.name} ({role})"


def token_digest(token: str) -> str:
    """SHA-256 of a token, hex: what the tokens file holds."""
    return hashlib.sha256(token.encode()).hexdigest()


def key_of(digest: str) -> bytes:
    """The signing key of the token whose SHA-256 (hex) is `digest`."""
    return hmac.new(bytes.fromhex(digest), _KEY_LABEL, hashlib.sha256).digest()


def key_id(key: bytes) -> str:
    return _b64(hmac.new(key, _KID_LABEL, hashlib.sha256).digest()[:9])


def sign(assertion: CallerAssertion, keys: Iterable[bytes]) -> str:
    """The header value: the payload, then a signature per key."""
    payload = _b64(
        json.dumps(
            {
                "v": 1,
                "aud": assertion.agent,
                "method": assertion.method,
                "rid": assertion.request_id,
                "name": assertion.name,
                "role": assertion.role,
                "agent": assertion.caller_agent,
                "methods": list(assertion.methods),
                "exp": round(assertion.expires_at, 3),
            },
            separators=(",", ":"),
            sort_keys=True,
        ).encode()
    )
    signatures = [f"{key_id(key)}={_b64(_mac(key, payload))}" for key in keys]
    if not signatures:
        raise ValueError(f"no key to sign for agent {assertion.agent!r}")
    return f"{payload}.{','.join(signatures)}"


def verify(
    value: str,
    keys: Iterable[bytes],
    *,
    agent: str,
    method: str | None = None,
    request_id: str | None = None,
    now: float | None = None,
) -> CallerAssertion:
    """The assertion `value` states, once it is signed with one of `keys`, names
    `agent` (and `method` and `request_id` where given), and has not expired."""
    if not value:
        raise AssertionRefused(f"no {HEADER} header: the service signs one for every request")
    if len(value) > MAX_LENGTH:
        raise AssertionRefused(f"the {HEADER} header is over {MAX_LENGTH} characters")
    payload, _, signed = value.partition(".")
    given: dict[str, str] = {}
    for part in signed.split(","):
        kid, _, mac = part.partition("=")
        given[kid] = mac
    if not any(
        kid in given and hmac.compare_digest(given[kid], _b64(_mac(key, payload)))
        for key in keys
        for kid in (key_id(key),)
    ):
        raise AssertionRefused(
            f"the {HEADER} is not signed for agent {agent!r} with this replica's token: "
            "it was not issued by the service this agent's token belongs to, or the "
            "token was rotated out of its tokens file"
        )
    try:
        fields = json.loads(_unb64(payload))
        found = CallerAssertion(
            agent=str(fields["aud"]),
            method=str(fields["method"]),
            request_id=str(fields["rid"]),
            name=str(fields["name"]),
            role=str(fields["role"]),
            caller_agent=str(fields.get("agent") or ""),
            methods=tuple(str(m) for m in fields["methods"]),
            expires_at=float(fields["exp"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise AssertionRefused(f"the {HEADER} payload is malformed: {exc}") from None
    if found.agent != agent:
        raise AssertionRefused(f"the {HEADER} is for agent {found.agent!r}, not {agent!r}")
    if method is not None and found.method != method:
        raise AssertionRefused(f"the {HEADER} is for {found.method}, not {method}")
    if request_id is not None and found.request_id != request_id:
        raise AssertionRefused(
            f"the {HEADER} is for request {found.request_id!r}, not {request_id!r}"
        )
    now = time.time() if now is None else now
    if found.expires_at + SKEW < now:
        raise AssertionRefused(
            f"the {HEADER} expired {now - found.expires_at:.0f} s ago: ask the service for "
            "a new one (each is good for one request, for a minute)"
        )
    return found


class ReplayGuard:
    """Request ids already taken, until their assertions expire: a copied assertion
    is refused the second time. Bounded: past `capacity` the oldest go first (an
    assertion that old has expired at the rate the service could issue them)."""

    def __init__(self, capacity: int = 65_536) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, str], float] = OrderedDict()

    def take(self, assertion: CallerAssertion, now: float | None = None) -> None:
        now = time.time() if now is None else now
        while self._seen:
            key, expires = next(iter(self._seen.items()))
            if expires + SKEW >= now and len(self._seen) < self.capacity:
                break
            del self._seen[key]
        key = (assertion.method, assertion.request_id)
        if key in self._seen:
            raise AssertionRefused(
                f"request {assertion.request_id!r} was already taken with this assertion; "
                "a request is answered once: send a new request with a new id"
            )
        self._seen[key] = assertion.expires_at


def _mac(key: bytes, payload: str) -> bytes:
    return hmac.new(key, payload.encode(), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"not base64url: {exc}") from None
