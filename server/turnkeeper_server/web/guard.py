"""What may reach the HTTP side before any handler runs.

- The Host allow-list (decision 182): on a loopback port without authentication a
  browser is the only client another party can steer, and a page of any origin can
  rename itself to 127.0.0.1 (DNS rebinding) and then read the answers as its own.
  There, only this host's names are served: `localhost`, `127.0.0.1`, `[::1]`, the
  listen host, and the names given with `--allow-host` (env TURNKEEPER_ALLOWED_HOSTS),
  each with any port or none. Anything else is 403 saying how to allow it. With
  tokens there is no ambient authority for a page to borrow, so any name is served.
- The connection gate (decision 181): a connection must send a whole request head
  within the header timeout of opening, or it is answered 408 and closed; one peer
  address holds at most `max_pending` connections that have not yet done so, and
  past that a new one is answered 429 and closed. After its first request the
  connection is aiohttp's, whose keep-alive timeout closes it when idle. An answer
  of 401 closes its connection: a caller without a valid token keeps nothing open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from aiohttp import web
from aiohttp.typedefs import Middleware

from turnkeeper_server.errors import PermissionDenied
from turnkeeper_server.web.connect import error_response

log = logging.getLogger(__name__)

LOCAL_NAMES: Final = frozenset({"localhost", "127.0.0.1", "[::1]"})
# What may follow a Host's name: nothing, or a colon and a port of ASCII digits
# (RFC 9110 allows it empty).
_PORT: Final = re.compile(r"(?::[0-9]*)?")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_name(header: str) -> str:
    """The name of a Host header, without its port, lower-case ("[::1]:80" -> "[::1]").

    Only a port of digits is taken off, and only right after the name (after the
    `]` of an IPv6 literal): anything else stays part of the name, so
    "[::1]evil.example" is that whole name and matches no allowed one."""
    header = header.strip().lower()
    if header.startswith("["):
        literal, bracket, rest = header.partition("]")
        return literal + "]" if bracket and _PORT.fullmatch(rest) else header
    name, colon, port = header.rpartition(":")
    return name if colon and _PORT.fullmatch(colon + port) else header


def allowed_hosts(listen_host: str, extra: Iterable[str]) -> frozenset[str]:
    own = f"[{listen_host}]" if ":" in listen_host else listen_host
    return LOCAL_NAMES | {own.lower()} | {host_name(name) for name in extra if name.strip()}


def host_allow_list(allowed: frozenset[str]) -> Middleware:
    """A middleware answering 403 to a request whose Host is not in `allowed`."""

    @web.middleware
    async def check_host(request: web.Request, handler: Handler) -> web.StreamResponse:
        header = request.headers.get("Host")
        # No Host at all: not a browser (every browser sends one), so not a page.
        if header is not None and host_name(header) not in allowed:
            name = host_name(header)
            return error_response(
                PermissionDenied(
                    f"Host {name!r} is not a name of this service: it listens on loopback "
                    "without authentication, where a web page could reach it by DNS "
                    f"rebinding. Open it as http://127.0.0.1:PORT/ or http://localhost:PORT/, "
                    f"or allow the name with --allow-host {name} (env "
                    "TURNKEEPER_ALLOWED_HOSTS, comma-separated)"
                )
            )
        return await handler(request)

    return check_host


def _raw_response(status: str, code: str, message: str) -> bytes:
    body = json.dumps({"code": code, "message": message}).encode()
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


class ConnectionGate:
    """Connections per peer address that have not yet sent a whole request head,
    and the header timeout. `factory(inner)` wraps aiohttp's protocol factory; the
    `middleware` tells the gate a connection's request has arrived."""

    def __init__(self, *, header_timeout: float, max_pending: int, setting: str) -> None:
        self.header_timeout = header_timeout
        self.max_pending = max_pending
        self.setting = setting
        self._pending: Counter[str] = Counter()
        self.refused = 0
        self.timed_out = 0

    def pending(self, peer: str | None = None) -> int:
        return sum(self._pending.values()) if peer is None else self._pending[peer]

    def factory(self, inner: Callable[[], Any]) -> Callable[[], asyncio.Protocol]:
        return lambda: _Gated(self, inner())

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        protocol = transport.get_protocol() if transport is not None else None
        if isinstance(protocol, _Gated):
            protocol.arrived()
        try:
            response = await handler(request)
        except web.HTTPException as exc:
            if exc.status == 401:
                exc.force_close()
            raise
        if response.status == 401:
            response.force_close()
        return response


class _Gated(asyncio.Protocol):
    """aiohttp's protocol for one connection, counted while its first request head
    has not arrived. Every protocol method is passed on unchanged."""

    def __init__(self, gate: ConnectionGate, inner: Any) -> None:
        self.gate = gate
        self.inner = inner
        self.peer = ""
        self.transport: asyncio.Transport | None = None
        self.waiting = False
        self.refused = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peername = transport.get_extra_info("peername")
        self.peer = str(peername[0]) if isinstance(peername, tuple) else "local"
        gate = self.gate
        if gate._pending[self.peer] >= gate.max_pending:
            self.refused = True
            gate.refused += 1
            if gate.refused == 1 or gate.refused % 1000 == 0:
                log.warning(
                    "HTTP: refused a connection from %s: %d of its connections have not "
                    "sent a request yet (limit %d, %s); %d refused so far",
                    self.peer,
                    gate._pending[self.peer],
                    gate.max_pending,
                    gate.setting,
                    gate.refused,
                )
            transport.write(
                _raw_response(
                    "429 Too Many Requests",
                    "resource_exhausted",
                    f"{gate._pending[self.peer]} connections from {self.peer} have not sent "
                    f"a request yet; the limit is {gate.max_pending} ({gate.setting})",
                )
            )
            transport.close()
            return
        gate._pending[self.peer] += 1
        self.waiting = True
        self.timer = asyncio.get_running_loop().call_later(gate.header_timeout, self._expire)
        self.inner.connection_made(transport)

    def arrived(self) -> None:
        if not self.waiting:
            return
        self.waiting = False
        if self.timer is not None:
            self.timer.cancel()
        self.gate._pending[self.peer] -= 1
        if not self.gate._pending[self.peer]:
            del self.gate._pending[self.peer]

    def _expire(self) -> None:
        if not self.waiting or self.transport is None:
            return
        self.gate.timed_out += 1
        self.transport.write(
            _raw_response(
                "408 Request Timeout",
                "deadline_exceeded",
                f"no whole request arrived within {self.gate.header_timeout:g} s "
                "of connecting (--http-header-timeout)",
            )
        )
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.arrived()
        if not self.refused:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.refused:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self.refused else self.inner.eof_received()

    def pause_writing(self) -> None:
        if not self.refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.inner.resume_writing()
