"""The service's NATS connection: mirroring (via the outbox) and hand-offs.

The connection is made with nats-py's own reconnection switched off and redone
here instead. nats-py would otherwise keep messages published while it is
disconnected in a buffer and send them on reconnect, while the outbox, not
knowing whether they went out, sends them again: a duplicate. Here a message is
only published on a live connection, and a row leaves the outbox only after a
flush (a PING/PONG round trip) proved the server had it.

Each connection has a "lost" signal of its own (decision 500): a publish or flush
that failed on a connection drops that connection only, never the one the link
dialled since. (One shared signal let a batch cut off by a NATS restart, failing
two seconds later, drop the fresh connection to the restarted server, just as the
publisher started its next batch on it; that batch failed the same way, and so on
for as long as anything was written: the outbox stopped draining with NATS up.)
A connection whose flush timed out is dropped (decision 501): nats-py cannot go on
using it safely.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

import nats
from nats.aio.client import Client
from nats.errors import (
    BadSubjectError,
    ConnectionClosedError,
    MaxPayloadError,
    NoRespondersError,
)
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeout
from turnkeeper import _tracing as tracing
from turnkeeper._nats_auth import NatsAuth

from turnkeeper_server.log_rate import LogRate
from turnkeeper_server.store.outbox_rows import messages
from turnkeeper_server.store.records import OutboxRow

log = logging.getLogger(__name__)

# How long NATS may be out of reach before the link warns (then every 30 s).
UNREACHABLE_GRACE = 5.0

# The JSON-RPC method by which the service hands a replica a turn to execute.
EXECUTE_METHOD = "turnkeeper/execute"


# What nats-py refuses in a subject it publishes to (a CR or LF would inject a command).
_SUBJECT_INVALID = re.compile(r"[ \t\r\n]")
# The header block of a message with only a Nats-Msg-Id, without the id's digits.
_HEADER_LENGTH = len(b"NATS/1.0\r\nNats-Msg-Id: \r\n\r\n")


class Unpublishable(MaxPayloadError):
    """An outbox message the NATS server will never take: with its headers, it is
    bigger than the server's max_payload (which counts them, decision 504)."""

    def __init__(self, msg_id: int, size: int, max_payload: int) -> None:
        super().__init__()
        self.msg_id = msg_id
        self.size = size
        self.max_payload = max_payload

    def __str__(self) -> str:
        return (
            f"outbox message {self.msg_id} is {self.size} bytes with its headers, over "
            f"the NATS server's max_payload of {self.max_payload}"
        )


def _hpub_frames(
    subject: str, numbered: Iterable[tuple[int, bytes]], traceparent: str | None, max_payload: int
) -> list[bytes]:
    """The HPUB frames nc.publish(subject, payload, headers={"Nats-Msg-Id": id}) sends
    for one outbox row's (id, payload) messages (with a traceparent header too when
    the row carries one); Unpublishable if one is, with its headers, over the
    server's limit (the server counts them: it would close the connection). The
    subject is encoded once per row, not per message: this loop runs once per event
    at ingest rates (bench/ingest.py)."""
    if traceparent is not None:
        frames = []
        trace = traceparent.encode()
        for msg_id, payload in numbered:
            block = b"NATS/1.0\r\nNats-Msg-Id: %d\r\ntraceparent: %s\r\n\r\n" % (msg_id, trace)
            size = len(block) + len(payload)
            if size > max_payload:
                raise Unpublishable(msg_id, size, max_payload)
            frames.append(
                b"HPUB %s  %d %d\r\n%s%s\r\n" % (subject.encode(), len(block), size, block, payload)
            )
        return frames
    head = b"HPUB %s  " % subject.encode()
    frames = []
    for msg_id, payload in numbered:
        digits = b"%d" % msg_id
        header = _HEADER_LENGTH + len(digits)
        size = header + len(payload)
        if size > max_payload:
            raise Unpublishable(msg_id, size, max_payload)
        frames.append(
            b"%s%d %d\r\nNATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n%s\r\n"
            % (head, header, size, digits, payload)
        )
    return frames


def agent_subject(prefix: str, namespace: str, agent: str) -> str:
    return f"{prefix}.{namespace}.agents.{agent}.tasks"


def version_subject(prefix: str, namespace: str, agent: str, fingerprint: str) -> str:
    """Where the replicas serving one graph version of the agent take hand-offs
    (docs/versions.md), one of them per hand-off."""
    return f"{prefix}.{namespace}.agents.{agent}.versions.{fingerprint}"


def replica_subject(prefix: str, namespace: str, agent: str, incarnation: str) -> str:
    """Where one incarnation of a replica takes the hand-offs that carry their claim
    (decision 590): the service chose it, and nobody else may run the turn."""
    return f"{prefix}.{namespace}.agents.{agent}.replicas.{incarnation}"


# Told to every replica of an agent (no queue group): "stop executing this turn".
CANCEL_METHOD = "turnkeeper/cancel"
# Asked on the control subject before a lapsed lease's turns are re-driven: does the
# replica of this incarnation still run them? Only that replica answers.
ALIVE_METHOD = "turnkeeper/alive"


def control_subject(prefix: str, namespace: str, agent: str) -> str:
    """Where every replica of the agent listens for what concerns whichever of them
    runs a turn (a cancel): the tasks subject reaches one member of the group only."""
    return f"{prefix}.{namespace}.agents.{agent}.control"


class _Connection:
    """A connection in use and the signal that it is lost, its own: set by nats-py
    when the connection closes, or by the link when a flush on it failed."""

    __slots__ = ("lost", "nc")

    def __init__(self, nc: Client, lost: asyncio.Event) -> None:
        self.nc = nc
        self.lost = lost


class NatsLink:
    def __init__(
        self,
        url: str | None,
        *,
        name: str = "turnkeeper",
        auth: NatsAuth | None = None,
        prepare: Callable[[Client], Awaitable[None]] | None = None,
    ) -> None:
        self.url = url
        self.name = name
        self.auth = auth or NatsAuth()
        # Run on each new connection before it is used (the JetStream stream); a
        # failure drops the connection and the link dials again later.
        self.prepare = prepare
        # Run on each new connection once it is in use (subscriptions of the service's
        # own, such as the agent directory's); a failure is logged, not fatal.
        self.on_connect: list[Callable[[Client], Awaitable[None]]] = []
        # Run each time a connection in use is lost (the health entry for NATS).
        self.on_lost: list[Callable[[], Awaitable[None]]] = []
        self._conn: _Connection | None = None
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        # The lost signal of the connection being dialled or in use (a stop sets it).
        self._lost = asyncio.Event()
        self._stop = asyncio.Event()
        self._stopping = False
        # Since when no connection has been had (None: connected), and the warning
        # that says so once it has lasted UNREACHABLE_GRACE, at most every 30 s.
        self._down_since: float | None = None
        self._unreachable = LogRate(log, interval=30.0)
        self._refused = LogRate(log, interval=30.0)
        self._too_large = LogRate(log, interval=30.0)

    @property
    def enabled(self) -> bool:
        return self.url is not None

    @property
    def connected(self) -> bool:
        return self._usable() is not None

    @property
    def client(self) -> Client | None:
        conn = self._usable()
        return conn.nc if conn is not None else None

    def _usable(self) -> _Connection | None:
        """The connection in use, unless it is lost (even if the link has not yet
        noticed: its flushes could not be trusted)."""
        conn = self._conn
        if conn is None or conn.lost.is_set() or not conn.nc.is_connected:
            return None
        return conn

    async def start(self) -> None:
        if self.url is None:
            log.warning("no NATS URL configured: mirroring to NATS is off, hand-offs are off")
            return
        self._task = asyncio.create_task(self._maintain(), name="nats-link")

    async def wait_connected(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._connected.wait(), timeout)
        return self.connected

    async def _maintain(self) -> None:
        delay = 0.05
        while not self._stopping:
            # A new signal per connection: what fails on an old one cannot reach it.
            lost = self._lost = asyncio.Event()
            nc = await self._dial(lost)
            if nc is None:
                self._say_unreachable()
                if not self._stopping:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 2.0)
                continue
            if self.prepare is not None:
                try:
                    await self.prepare(nc)
                except Exception as exc:
                    log.error("NATS at %s not usable yet: %s", self.url, exc)
                    await _close(nc)
                    if not self._stopping:
                        await asyncio.sleep(delay)
                        delay = min(delay * 2, 2.0)
                    continue
            delay = 0.05
            self._down_since = None
            conn = self._conn = _Connection(nc, lost)
            self._connected.set()
            log.info("connected to NATS at %s", self.url)
            for hook in self.on_connect:
                try:
                    await hook(nc)
                except Exception as exc:
                    log.warning("NATS connection hook %s failed: %s", hook, exc)
            await lost.wait()
            self._connected.clear()
            self._conn = None
            # A flush still waiting on this connection fails now, not at its timeout:
            # nats-py's close leaves its PONG unanswered.
            _fail_flushes(nc)
            for on_lost in self.on_lost:
                try:
                    await on_lost()
                except Exception as exc:
                    log.warning("NATS connection-lost hook %s failed: %s", on_lost, exc)
            if not self._stopping:
                log.warning(
                    "lost the NATS connection%s; reconnecting (the outbox keeps the backlog)",
                    _why(conn.nc),
                )
            await _close(nc)

    def _say_unreachable(self) -> None:
        """A warning that names the URL and what to check, once NATS has been out of
        reach for UNREACHABLE_GRACE (a start-up's first dials, or a restart of the
        bundled server, say nothing): agents cannot be reached until it is."""
        now = time.monotonic()
        if self._down_since is None:
            self._down_since = now
        if self._stopping or now - self._down_since < UNREACHABLE_GRACE:
            return
        self._unreachable.warning(
            "NATS at %s not reachable for %.0f s: agents cannot be reached and turns "
            "cannot start until it is; check --nats-url (TURNKEEPER_NATS_URL), or "
            "run without it to use the bundled NATS",
            self.url,
            now - self._down_since,
        )

    async def _dial(self, lost: asyncio.Event) -> Client | None:
        """One connection attempt that a stop can abandon at once (nats-py's connect
        may swallow a cancellation while it dials); nats-py tells `lost` when the
        connection closes."""
        assert self.url is not None

        async def on_lost() -> None:
            lost.set()

        try:
            # Read at each dial: a rotated token file is picked up by the next one.
            auth = self.auth.connect_kwargs()
        except (OSError, ValueError) as exc:
            log.warning("cannot connect to NATS: %s", exc)
            return None
        dial = asyncio.ensure_future(
            nats.connect(
                self.url,
                **auth,
                name=self.name,
                allow_reconnect=False,
                connect_timeout=2,
                disconnected_cb=on_lost,
                closed_cb=on_lost,
                error_cb=self._on_error,
            )
        )
        stopped = asyncio.ensure_future(self._stop.wait())
        await asyncio.wait({dial, stopped}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if not dial.done():
            dial.add_done_callback(_close_abandoned)
            return None
        if dial.cancelled() or dial.exception() is not None:
            log.debug(
                "NATS at %s not reachable: %s",
                self.url,
                None if dial.cancelled() else dial.exception(),
            )
            return None
        nc = dial.result()
        if self._stopping:
            await _close(nc)
            return None
        return nc

    async def _on_error(self, exc: Exception) -> None:
        # An -ERR the server sends and keeps the connection for (a permissions
        # violation) is a misconfiguration worth seeing; one it closes the
        # connection for is named when the link says it lost the connection.
        if isinstance(exc, NatsError) and "permissions violation" in str(exc).lower():
            self._refused.warning("NATS refused: %s", exc)
        else:
            log.debug("NATS error: %s", exc)

    async def publish_batch(self, rows: Sequence[OutboxRow]) -> bool:
        """Publish outbox rows' messages (store/outbox_rows.py), each with its outbox
        id as Nats-Msg-Id (JetStream de-duplicates by it) and the row's trace context
        when tracing was on, then flush; True if the server confirmed all. A failure
        drops the connection it happened on (a flush that timed out leaves nats-py's
        connection unusable: decision 501), and only that one (decision 500)."""
        conn = self._usable()
        if conn is None:
            return False
        nc = conn.nc
        try:
            transport = getattr(nc, "_transport", None)
            if transport is None:
                # A nats-py without it: its public publish, one by one (whose flush may
                # then be answered before the server read them; see below).
                for row in rows:
                    subject, trace = row[1], row[3]
                    for msg_id, payload in messages(row):
                        headers = {"Nats-Msg-Id": str(msg_id)}
                        if trace is not None:
                            headers["traceparent"] = trace
                        await nc.publish(subject, payload, headers=headers)
            else:
                # The same HPUB frames nc.publish builds, at a quarter of its CPU per
                # message (bench/ingest.py: the publisher was a fifth of the event
                # loop), written straight onto the socket as flush() writes its PING:
                # the PING then follows the batch, and its PONG proves the server read
                # it. (Queued on nats-py's pending buffer instead, they went out after
                # the PING: a PONG came back before the server had the batch, and rows
                # were deleted whose messages a dropped connection had lost.)
                max_payload = nc.max_payload
                checked: set[str] = set()
                frames: list[bytes] = []
                for row in rows:
                    subject, trace = row[1], row[3]
                    if subject not in checked:
                        if not subject or _SUBJECT_INVALID.search(subject):
                            raise BadSubjectError
                        checked.add(subject)
                    frames += _hpub_frames(subject, messages(row), trace, max_payload)
                transport.writelines(frames)
            if not _flush_waits(nc):
                raise ConnectionError("nats-py's reader stopped: a flush would prove nothing")
            await nc.flush(timeout=2)
        except Unpublishable as exc:
            # Refused before a byte was written: the connection is fine. The row
            # stays (nothing unread leaves the outbox), and so does what follows it.
            self._too_large.error(
                "%s: it cannot be published, and the outbox waits behind it; raise "
                "max_payload on the NATS server (nats-server.conf) above it",
                exc,
            )
            return False
        except Exception as exc:
            log.warning(
                "publishing %d outbox messages failed: %s", len(rows), str(exc) or repr(exc)
            )
            conn.lost.set()
            return False
        return True

    async def request(
        self, subject: str, method: str, params: dict[str, Any], timeout: float
    ) -> Any:
        """A JSON-RPC request to one member of a queue group; None if nobody answered."""
        nc = self.client
        if nc is None:
            return None
        envelope = {
            "jsonrpc": "2.0",
            "id": uuid.uuid4().hex,
            "method": method,
            "params": params,
            "metadata": {},
        }
        headers: dict[str, str] = {}
        # The turn's trace goes on in the bridge that takes it (turnkeeper._tracing).
        tracing.inject(headers)
        try:
            msg = await nc.request(
                subject, json.dumps(envelope).encode(), timeout=timeout, headers=headers or None
            )
        except (NoRespondersError, NatsTimeout):
            return None
        except Exception as exc:
            log.warning("request %s on %s failed: %s", method, subject, exc)
            return None
        try:
            reply = json.loads(msg.data)
        except ValueError:
            return None
        if not isinstance(reply, dict) or "error" in reply:
            log.warning("request %s on %s refused: %s", method, subject, reply)
            return None
        return reply.get("result")

    async def notify(self, subject: str, method: str, params: dict[str, Any]) -> bool:
        """A JSON-RPC notification (no id, no answer) to every subscriber of `subject`;
        False when it could not be sent. Best effort: fencing is what makes a late
        writer stop for certain."""
        conn = self._usable()
        if conn is None:
            return False
        nc = conn.nc
        envelope = {"jsonrpc": "2.0", "method": method, "params": params, "metadata": {}}
        try:
            await nc.publish(subject, json.dumps(envelope).encode())
            await nc.flush(timeout=2)
        except Exception as exc:
            log.warning("notification %s on %s failed: %s", method, subject, str(exc) or repr(exc))
            # A flush that timed out leaves the connection unusable (decision 501).
            conn.lost.set()
            return False
        return True

    async def stop(self) -> None:
        self._stopping = True
        self._stop.set()
        self._lost.set()
        if self._task is not None:
            await self._task
            self._task = None
        if self._conn is not None:
            await _close(self._conn.nc)
            self._conn = None


# What getattr finds when a nats-py has no such attribute.
_ABSENT = object()


def _flush_waits(nc: Client) -> bool:
    """Whether nc.flush() will wait for the server's PONG. nats-py's returns at once,
    without a PING, once its reading or flushing task has ended: so it did after a
    flush that timed out, when the late PONG met the cancelled future and ended the
    reader (InvalidStateError), the connection still open."""
    for name in ("_reading_task", "_flusher_task"):
        task = getattr(nc, name, _ABSENT)
        if task is _ABSENT:
            continue  # a nats-py without it: nothing to check
        if not isinstance(task, asyncio.Future) or task.done():
            return False
    return True


def _fail_flushes(nc: Client) -> None:
    """Fail the flushes still waiting for a PONG on a connection the link dropped:
    nats-py's close leaves them to their timeout. Taken off its list too: a PONG
    still arriving finds none to answer (rather than a done one, which ends nats-py's
    reader with InvalidStateError)."""
    pongs = getattr(nc, "_pongs", None)
    if not isinstance(pongs, list):
        return
    for pong in pongs:
        if isinstance(pong, asyncio.Future) and not pong.done():
            pong.set_exception(ConnectionClosedError())
            # Marked retrieved: nats-py's own pings' futures are never awaited.
            pong.exception()
    pongs.clear()


def _why(nc: Client) -> str:
    """Why nats-py closed the connection, as it recorded it (the server's -ERR, a
    stale connection, end of stream), for the log line that says it was lost."""
    err = nc.last_error
    return f" ({str(err) or type(err).__name__})" if err is not None else ""


async def _close(nc: Client) -> None:
    """Close without ever hanging shutdown on a connection that is already gone."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), timeout=2)


_closing: set[asyncio.Future[None]] = set()


def _close_abandoned(dial: asyncio.Future[Client]) -> None:
    if not dial.cancelled() and dial.exception() is None:
        closing = asyncio.ensure_future(_close(dial.result()))
        _closing.add(closing)
        closing.add_done_callback(_closing.discard)
