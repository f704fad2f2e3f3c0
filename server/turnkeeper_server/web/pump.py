"""One pump for the service's event streams over SSE: a turn's events
(`/v1/turns/{id}/events`, sse.py) and a LangGraph run's stream parts
(web/langgraph/runs.py).

What every stream needs is here, once: WatchTurn's quota (held before the 200, so a
client over it is answered 429 in its protocol's form), the read-ahead bounded in
bytes, a heartbeat while nothing comes, a timeout on each write (a client that does
not read is dropped and resumes with Last-Event-ID, decision 184), and the end of the
stream when its caller's token is revoked (OpenStreams, as a gRPC WatchTurn's). What
a frame says, what the heartbeat and the last frames look like, is each protocol's
own `Framing`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import enum
import logging
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Final, Protocol

from aiohttp import web

from turnkeeper_server.operations.turns import TurnOperations
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.security.streams import OpenStream, OpenStreams
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext

log = logging.getLogger(__name__)

# A comment line this often keeps proxies and the browser from closing an idle stream.
KEEPALIVE_SECONDS: Final = 15.0
# Frames read ahead of the client, in bytes (always at least one frame), and how long
# one write may wait for a client that does not read before it is dropped.
BUFFER_BYTES: Final = 1 << 20
# Frames already read are written together up to about this many bytes.
COALESCE_BYTES: Final = 64 << 10
WRITE_TIMEOUT_SECONDS: Final = 30.0

HEADERS: Final = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-store",
    "X-Accel-Buffering": "no",
}


@dataclass(frozen=True, slots=True)
class Frame:
    """One SSE frame as bytes, and the journal seq it shows (None: no event's)."""

    data: bytes
    seq: int | None = None


class Framing(Protocol):
    """What one protocol's stream says besides its frames."""

    @property
    def heartbeat(self) -> bytes:
        """A comment frame, sent when nothing came for KEEPALIVE_SECONDS."""
        ...

    def revoked(self) -> bytes:
        """The last frame of a stream whose caller's token was revoked."""
        ...

    def failed(self, exc: Exception) -> bytes:
        """The last frame of a stream whose source failed."""
        ...

    async def ended(self, last_seq: int) -> bytes | None:
        """The last frame of a stream whose source ended (None: none)."""
        ...


class Outcome(enum.Enum):
    ENDED = "ended"  # the source ended, or failed and said so
    REVOKED = "revoked"  # the caller's token was revoked
    GONE = "gone"  # the client closed the connection
    STALLED = "stalled"  # the client took nothing for the write timeout: dropped


class _Empty(enum.Enum):
    EMPTY = enum.auto()


# What FrameBuffer.take answers when no frame is there yet.
EMPTY: Final = _Empty.EMPTY


class FrameBuffer:
    """Frames between the source and the client, bounded in bytes: `put` waits while
    the buffer holds `limit` bytes or more (one frame always fits). One source puts,
    one pump takes: a frame already there is taken without waiting (`take`)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self._items: collections.deque[tuple[Frame | Exception | None, int]] = collections.deque()
        self._readable = asyncio.Event()
        self._writable = asyncio.Event()

    async def put(self, item: Frame | Exception | None) -> None:
        size = len(item.data) if isinstance(item, Frame) else 0
        while self.bytes and self.bytes + size > self.limit:
            self._writable.clear()
            await self._writable.wait()
        self._items.append((item, size))
        self.bytes += size
        self._readable.set()

    def take(self) -> Frame | Exception | _Empty | None:
        """The next item, or EMPTY when there is none yet."""
        if not self._items:
            return EMPTY
        item, size = self._items.popleft()
        self.bytes -= size
        self._writable.set()
        return item

    async def get(self) -> Frame | Exception | None:
        while not self._items:
            self._readable.clear()
            await self._readable.wait()
        item = self.take()
        assert item is not EMPTY
        return item


class Pump:
    """Streams a source of frames to SSE clients; one per route, which keeps what
    its open streams hold (bytes read ahead plus what the socket has not taken, now
    and at its highest) and how many clients it dropped for not reading."""

    def __init__(
        self,
        operations: TurnOperations,
        streams: OpenStreams,
        *,
        write_timeout: float = WRITE_TIMEOUT_SECONDS,
        buffer_bytes: int = BUFFER_BYTES,
        keepalive: float = KEEPALIVE_SECONDS,
    ) -> None:
        self.operations = operations
        self.streams = streams
        self.write_timeout = write_timeout
        self.buffer_bytes = buffer_bytes
        self.keepalive = keepalive
        self.held: dict[int, int] = {}
        self.peak_held = 0
        self.dropped = 0
        self.dropped_event = asyncio.Event()

    def admit(self, request: web.Request) -> contextlib.AbstractContextManager[None]:
        """WatchTurn's quota for the caller (acting) at this request's address;
        RESOURCE_EXHAUSTED when it has none left. Enter it before `serve`, where a
        refusal can still be answered as the protocol answers errors."""
        return self.operations.watch_quota(HttpContext(request))

    async def serve(
        self,
        request: web.Request,
        caller: Caller | None,
        source: AsyncGenerator[Frame, None],
        framing: Framing,
        *,
        name: str,
        after: int = 0,
        preamble: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[web.StreamResponse, Outcome]:
        """Answer 200 and stream `source` (read as `caller`, so its rights checks
        are the caller's) until it ends, the client leaves or stalls, or the
        caller's token is revoked. `name` says whose stream it is in the log;
        `after`: the seq the client has; `preamble`: a frame sent first."""
        response = web.StreamResponse(headers={**HEADERS, **(headers or {})})
        await response.prepare(request)
        with web_auth.acting_as(caller), contextlib.ExitStack() as held:
            # Without authentication there is no token to revoke.
            entry = None if caller is None else held.enter_context(self.streams.hold(caller))
            outcome = await self._pump(
                response, request.transport, source, framing, entry, name, after, preamble
            )
        return response, outcome

    async def _pump(
        self,
        response: web.StreamResponse,
        transport: asyncio.Transport | None,
        source: AsyncGenerator[Frame, None],
        framing: Framing,
        entry: OpenStream | None,
        name: str,
        after: int,
        preamble: bytes | None,
    ) -> Outcome:
        frames = FrameBuffer(self.buffer_bytes)
        key = id(frames)

        async def read() -> None:
            try:
                async for item in source:
                    await frames.put(item)
                await frames.put(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await frames.put(exc)
            finally:
                with contextlib.suppress(Exception):
                    await source.aclose()

        async def write(data: bytes) -> None:
            # asyncio.timeout, not wait_for: no task per frame.
            try:
                async with asyncio.timeout(self.write_timeout):
                    await response.write(data)
            except TimeoutError:
                raise _Stalled() from None
            finally:
                buffered = transport.get_write_buffer_size() if transport is not None else 0
                self.held[key] = frames.bytes + buffered
                self.peak_held = max(self.peak_held, self.held[key])

        task = asyncio.create_task(read())
        last_seq = after
        # An item taken behind a run of frames written together, not yet handled.
        behind: Frame | Exception | _Empty | None = EMPTY
        try:
            if preamble is not None:
                await write(preamble)
            while True:
                if entry is not None and entry.revoked:
                    await write(framing.revoked())
                    return Outcome.REVOKED
                taken, behind = (frames.take() if behind is EMPTY else behind), EMPTY
                try:
                    if entry is not None:
                        entry.waiting = True
                    if taken is EMPTY:
                        async with asyncio.timeout(self.keepalive):
                            item = await frames.get()
                    else:
                        item = taken
                except TimeoutError:
                    await write(framing.heartbeat)
                    continue
                except asyncio.CancelledError:
                    # OpenStreams.end cancels a waiting stream whose token was revoked.
                    if entry is None or not entry.revoked or entry.task is None:
                        raise
                    entry.task.uncancel()
                    await write(framing.revoked())
                    return Outcome.REVOKED
                finally:
                    if entry is not None:
                        entry.waiting = False
                if item is None:
                    last = await framing.ended(last_seq)
                    if last is not None:
                        await write(last)
                    return Outcome.ENDED
                if isinstance(item, Exception):
                    await write(framing.failed(item))
                    return Outcome.ENDED
                if item.seq is not None:
                    last_seq = item.seq
                # The frames already read go out in one write: one chunk, one send.
                data = item.data
                behind = frames.take()
                if isinstance(behind, Frame):
                    run = [data]
                    size = len(data)
                    while isinstance(behind, Frame) and size < COALESCE_BYTES:
                        run.append(behind.data)
                        size += len(behind.data)
                        if behind.seq is not None:
                            last_seq = behind.seq
                        behind = frames.take()
                    data = b"".join(run)
                await write(data)
        except ConnectionResetError:
            # The client went away: nothing to answer.
            return Outcome.GONE
        except _Stalled:
            # A client that does not read is dropped; what it has not taken is freed
            # with its socket, and it resumes from its Last-Event-ID.
            log.info(
                "%s: the client took nothing for %g s; dropped it (it resumes after seq "
                "%d with Last-Event-ID)",
                name,
                self.write_timeout,
                last_seq,
            )
            self.dropped += 1
            self.dropped_event.set()
            if transport is not None:
                transport.abort()
            return Outcome.STALLED
        finally:
            self.held.pop(key, None)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class _Stalled(Exception):
    """The client took nothing for the write timeout."""
