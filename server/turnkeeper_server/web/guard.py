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
  address holds at most `max_pending` connections that have not yet done so: past
  that, a new one whose head has still not arrived when its probation ends (a
  second, at most half the header timeout) is answered 429 and closed, so a burst
  of requests accepted faster than their heads arrive is served (decision 321); a
  head counts from its blank line, not from its handler. After its first request the
  connection is aiohttp's, whose keep-alive timeout closes it when idle. An answer
  of 401 closes its connection: a caller without a valid token keeps nothing open.
- Open connections (decision 274), counted before any authentication: at most
  `max_open` in all and `max_open_per_peer` from one address, each open TCP
  connection counted from accept to close whatever it carries (one request, a
  keep-alive idling, an event stream); past either a new one is answered 503 or 429
  and closed at once, so a flood of connections holds a bounded number of file
  descriptors and the service keeps answering. Refusals are logged one line a
  second at most, with a count.
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
from turnkeeper_server.log_rate import LogRate
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


# How long a connection past the pending cap has for its request head before it is
# answered 429 (at most half the header timeout): a burst's heads arrive within it,
# a connection that sends nothing does not (decision 321).
PROBATION: Final = 1.0


class ConnectionGate:
    """Connections per peer address that have not yet sent a whole request head,
    and the header timeout. `factory(inner)` wraps aiohttp's protocol factory; the
    `middleware` tells the gate a connection's request has arrived."""

    def __init__(
        self,
        *,
        header_timeout: float,
        max_pending: int,
        setting: str,
        max_open: int = 4096,
        max_open_per_peer: int = 256,
    ) -> None:
        self.header_timeout = header_timeout
        self.max_pending = max_pending
        self.setting = setting
        self.max_open = max_open
        self.max_open_per_peer = max_open_per_peer
        self._pending: Counter[str] = Counter()
        self._open: Counter[str] = Counter()
        self.open_total = 0
        self.refused = 0
        self.timed_out = 0
        self.refusals = LogRate(log)

    def pending(self, peer: str | None = None) -> int:
        return sum(self._pending.values()) if peer is None else self._pending[peer]

    def open(self, peer: str | None = None) -> int:
        return self.open_total if peer is None else self._open[peer]

    def _full(self, peer: str) -> tuple[str, str] | None:
        """Why a new connection from `peer` is refused: (HTTP status, message)."""
        if self.open_total >= self.max_open:
            return (
                "503 Service Unavailable",
                f"the service holds {self.open_total} HTTP connections, its limit "
                "(--http-max-connections); try again later",
            )
        if self._open[peer] >= self.max_open_per_peer:
            return (
                "429 Too Many Requests",
                f"{self._open[peer]} connections from {peer} are open; the limit is "
                f"{self.max_open_per_peer} (--http-max-connections-per-peer)",
            )
        return None

    def _over_pending(self, peer: str) -> tuple[str, str] | None:
        """Why a connection from `peer` still without a whole request head is
        refused, past the pending cap (decision 321)."""
        if self._pending[peer] > self.max_pending:
            return (
                "429 Too Many Requests",
                f"{self._pending[peer] - 1} other connections from {peer} have not sent a "
                f"request yet; the limit is {self.max_pending} ({self.setting})",
            )
        return None

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
        # Counted among the gate's open connections (until connection_lost).
        self.counted = False
        self.timer: asyncio.TimerHandle | None = None
        # Set while the connection is past the pending cap (decision 321).
        self.probation: asyncio.TimerHandle | None = None
        # The last bytes of a head still arriving (its blank line may be split).
        self._tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peername = transport.get_extra_info("peername")
        self.peer = str(peername[0]) if isinstance(peername, tuple) else "local"
        gate = self.gate
        full = gate._full(self.peer)
        if full is not None:
            self.refused = True
            gate.refused += 1
            status, message = full
            gate.refusals.warning(
                "HTTP: refused a connection from %s: %s; %d refused so far",
                self.peer,
                message,
                gate.refused,
            )
            code = "unavailable" if status.startswith("503") else "resource_exhausted"
            transport.write(_raw_response(status, code, message))
            transport.close()
            return
        gate._open[self.peer] += 1
        gate.open_total += 1
        self.counted = True
        gate._pending[self.peer] += 1
        self.waiting = True
        loop = asyncio.get_running_loop()
        self.timer = loop.call_later(gate.header_timeout, self._expire)
        if gate._pending[self.peer] > gate.max_pending:
            # Past the pending cap: refused only if its request head has still not
            # come when the probation ends. A burst of requests from one address
            # (200 event streams at once) is accepted faster than its heads arrive;
            # connections that send nothing are answered 429 all the same.
            self.probation = loop.call_later(
                min(PROBATION, gate.header_timeout / 2), self._probation_over
            )
        self.inner.connection_made(transport)

    def _probation_over(self) -> None:
        self.probation = None
        if not self.waiting or self.transport is None:
            return
        over = self.gate._over_pending(self.peer)
        if over is None:
            return
        gate = self.gate
        gate.refused += 1
        status, message = over
        gate.refusals.warning(
            "HTTP: refused a connection from %s: %s; %d refused so far",
            self.peer,
            message,
            gate.refused,
        )
        self.transport.write(_raw_response(status, "resource_exhausted", message))
        self.transport.close()

    def arrived(self) -> None:
        if not self.waiting:
            return
        self.waiting = False
        if self.timer is not None:
            self.timer.cancel()
        if self.probation is not None:
            self.probation.cancel()
            self.probation = None
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
        if self.counted:
            self.counted = False
            gate = self.gate
            gate.open_total -= 1
            gate._open[self.peer] -= 1
            if not gate._open[self.peer]:
                del gate._open[self.peer]
        if not self.refused:
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        if self.waiting:
            # The whole head is here once its blank line is, though aiohttp has yet
            # to start the handler: no longer pending (decision 321).
            seen = self._tail + data
            if b"\r\n\r\n" in seen:
                self.arrived()
            else:
                self._tail = seen[-3:]
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self.refused else self.inner.eof_received()

    def pause_writing(self) -> None:
        if not self.refused:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if not self.refused:
            self.inner.resume_writing()


# What asyncio's accept loop says when the process is out of descriptors; it pauses
# accepting for a second and says it again, each time with a traceback.
_ACCEPT_FAILED: Final = "socket.accept() out of system resource"


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> LogRate:
    """The loop's exception handler, with failed accepts logged one line a second
    with a count and no traceback (decision 274); every other error as before."""
    failed = LogRate(log)
    previous = loop.get_exception_handler()

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith(_ACCEPT_FAILED):
            failed.error("HTTP: could not accept a connection: %s", context.get("exception"))
        elif previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
    return failed
