"""A turn's events as Server-Sent Events: WatchTurn's semantics over HTTP.

    GET /v1/turns/{turn_id}/events[?lastEventId=N&attempt=A]
    Last-Event-ID: N                      (the header wins over the query parameter)

Frames (each `data:` is one JSON object):

- `event: event`, `id: <seq>`: a retained event {seq, attempt, type, data, createdAt};
- `event: reset`, `id: 0`: the turn was rewound to `seq` (the boundary) by `attempt`;
  drop everything shown, the retained events follow again from seq 1. Its id is 0
  so that a reconnect after it asks for the replay from the start;
- `event: end`: after the terminal event (or at once for a turn that is over and
  whose terminal event is at or before the resume point); the stream then closes;
- `event: error`: the stream failed after it had started ({code, message}).

Resuming: a reconnect sends the id of the last event it showed (the page's fetch
reader sets the header; EventSource sets it itself). With `attempt` (of that event)
the service first checks that the event is still retained as shown: if the turn was
rewound while nothing was connected, the stream starts with a reset (`local: true`)
and replays from seq 1, so no stale event stays on the page. The stream is the gRPC
servicer's WatchTurn, so rights, quotas and frames are WatchTurn's own; the quota
is held before the response starts, so a client over it is answered 429. Each open
stream is held in the service's OpenStreams as a gRPC WatchTurn is, so a token reload
that revokes its token ends it with an `error` frame (UNAUTHENTICATED).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any, Final

from aiohttp import web
from turnkeeper.v1 import turns_pb2

from turnkeeper_server.errors import InvalidArgument, Unauthenticated, status_for
from turnkeeper_server.security.auth import Caller, TokenStore, client_key
from turnkeeper_server.security.streams import OpenStream, OpenStreams
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import HttpContext, connect_code, error_response, to_json

log = logging.getLogger(__name__)

# A comment line this often keeps proxies and the browser from closing an idle stream.
KEEPALIVE_SECONDS: Final = 15.0
# Frames read ahead of the client, in bytes (always at least one frame), and how long
# one write may wait for a client that does not read before it is dropped; it
# resumes with Last-Event-ID (decision 184).
BUFFER_BYTES: Final = 1 << 20
WRITE_TIMEOUT_SECONDS: Final = 30.0


class FrameBuffer:
    """Frames between the watch and the client, bounded in bytes: `put` waits while
    the buffer holds `limit` bytes or more (one frame always fits)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.bytes = 0
        self._items: collections.deque[tuple[bytes | BaseException | None, int]] = (
            collections.deque()
        )
        self._changed = asyncio.Condition()

    async def put(self, item: bytes | BaseException | None) -> None:
        size = len(item) if isinstance(item, bytes) else 0
        async with self._changed:
            await self._changed.wait_for(lambda: not self.bytes or self.bytes + size <= self.limit)
            self._items.append((item, size))
            self.bytes += size
            self._changed.notify_all()

    async def get(self) -> bytes | BaseException | None:
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self._items))
            item, size = self._items.popleft()
            self.bytes -= size
            self._changed.notify_all()
            return item


def frame(event: str, data: Any, *, id: int | None = None) -> bytes:
    """One SSE frame. `data` is JSON on a single line, so it needs no splitting."""
    lines = []
    if id is not None:
        lines.append(f"id: {id}")
    lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode()


def event_data(event: turns_pb2.Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "attempt": event.attempt,
        "type": event.type,
        "data": json.loads(event.data_json or "null"),
        "createdAt": to_json(event).get("createdAt"),
    }


def watch_frame(response: turns_pb2.WatchTurnResponse) -> bytes:
    """A WatchTurn frame as SSE."""
    if response.HasField("reset"):
        r = response.reset
        return frame(
            "reset",
            {"seq": r.seq, "attempt": r.attempt, "checkpointId": r.checkpoint_id, "local": False},
            id=0,
        )
    return frame("event", event_data(response.event), id=response.event.seq)


def resume_point(request: web.Request) -> tuple[int, int | None]:
    """(after_seq, attempt of that event or None) from Last-Event-ID and the query."""
    raw = request.headers.get("Last-Event-ID") or request.query.get("lastEventId") or "0"
    attempt_raw = request.query.get("attempt")
    try:
        after = int(raw)
        attempt = int(attempt_raw) if attempt_raw not in (None, "") else None
    except ValueError:
        raise InvalidArgument(
            "Last-Event-ID (or lastEventId) and attempt must be whole numbers"
        ) from None
    if after < 0:
        raise InvalidArgument("Last-Event-ID must not be negative")
    return after, attempt


class EventStream:
    """The handler of GET /v1/turns/{turn_id}/events."""

    def __init__(
        self,
        servicer: Any,
        tokens: TokenStore | None,
        streams: OpenStreams | None = None,
        *,
        buffer_bytes: int = BUFFER_BYTES,
        write_timeout: float = WRITE_TIMEOUT_SECONDS,
    ) -> None:
        self.servicer = servicer
        self.tokens = tokens
        self.streams = streams if streams is not None else OpenStreams()
        self.buffer_bytes = buffer_bytes
        self.write_timeout = write_timeout
        # What the open streams hold: frames read ahead plus what the socket has not
        # taken yet, now and at its highest; and the clients dropped for not reading.
        self.held: dict[int, int] = {}
        self.peak_held = 0
        self.dropped = 0
        self.dropped_event = asyncio.Event()

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        turn_id = request.match_info["turn_id"]
        context = HttpContext(request)
        # WatchTurn's quota, held here rather than by the watch: a client over it is
        # answered 429 before the stream's 200 (decision 187).
        quota = contextlib.ExitStack()
        try:
            caller = web_auth.caller_of(request, self.tokens)
            after, attempt = resume_point(request)
            with web_auth.acting_as(caller):
                web_auth.require("WatchTurn")
                # GetTurn validates the id and answers NOT_FOUND for an unknown turn
                # (and for another agent's, to an agent token) before the stream opens.
                got = await self.servicer.GetTurn(
                    turns_pb2.GetTurnRequest(turn_id=turn_id), context
                )
                start, local_reset = await self._start(got.turn, after, attempt, context)
                quota.enter_context(self.servicer.watch_streams.hold(client_key(context)))
        except Exception as exc:
            quota.close()
            return error_response(exc)
        with quota:
            return await self._respond(request, caller, turn_id, start, local_reset, context)

    async def _respond(
        self,
        request: web.Request,
        caller: Caller | None,
        turn_id: str,
        start: int,
        local_reset: bytes | None,
        context: HttpContext,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        if local_reset is not None:
            await response.write(local_reset)
        with web_auth.acting_as(caller), contextlib.ExitStack() as held:
            # Without authentication there is no token to revoke.
            entry = None if caller is None else held.enter_context(self.streams.hold(caller))
            await self._stream(response, request.transport, turn_id, start, context, entry)
        return response

    async def _start(
        self, turn: turns_pb2.Turn, after: int, attempt: int | None, context: HttpContext
    ) -> tuple[int, bytes | None]:
        """Where the watch starts, and a reset of our own when the resume point is no
        longer what the page showed (the turn was rewound while it was away)."""
        if after == 0:
            return 0, None
        stale = after > turn.last_seq
        if not stale and attempt is not None:
            listed = await self.servicer.ListEvents(
                turns_pb2.ListEventsRequest(turn_id=turn.turn_id, after_seq=after - 1, page_size=1),
                context,
            )
            shown = [e for e in listed.events if e.seq == after]
            stale = not shown or shown[0].attempt != attempt
        if not stale:
            return after, None
        reset = {"seq": 0, "attempt": turn.attempts, "checkpointId": "", "local": True}
        return 0, frame("reset", reset, id=0)

    async def _stream(
        self,
        response: web.StreamResponse,
        transport: asyncio.Transport | None,
        turn_id: str,
        after: int,
        context: HttpContext,
        entry: OpenStream | None,
    ) -> None:
        frames = FrameBuffer(self.buffer_bytes)
        key = id(frames)

        async def pump() -> None:
            watch: AsyncIterator[turns_pb2.WatchTurnResponse] = self.servicer.watch_frames(
                turns_pb2.WatchTurnRequest(turn_id=turn_id, after_seq=after)
            )
            try:
                async for item in watch:
                    seq = item.event.seq if item.HasField("event") else None
                    data = watch_frame(item)
                    # The seq rides in front of the frame: "<seq>\n" (or "-\n").
                    await frames.put(f"{'-' if seq is None else seq}\n".encode() + data)
                await frames.put(None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                await frames.put(exc)
            finally:
                with contextlib.suppress(Exception):
                    await watch.aclose()  # type: ignore[attr-defined]

        async def write(data: bytes) -> None:
            try:
                await asyncio.wait_for(response.write(data), self.write_timeout)
            except TimeoutError:
                raise _Stalled() from None
            finally:
                buffered = transport.get_write_buffer_size() if transport is not None else 0
                self.held[key] = frames.bytes + buffered
                self.peak_held = max(self.peak_held, self.held[key])

        task = asyncio.create_task(pump())
        last_seq = after
        try:
            while True:
                if entry is not None and entry.revoked:
                    await write(_revoked())
                    return
                try:
                    if entry is not None:
                        entry.waiting = True
                    item = await asyncio.wait_for(frames.get(), KEEPALIVE_SECONDS)
                except TimeoutError:
                    await write(b": keep-alive\n\n")
                    continue
                except asyncio.CancelledError:
                    # OpenStreams.end cancels a waiting stream whose token was revoked.
                    if entry is None or not entry.revoked or entry.task is None:
                        raise
                    entry.task.uncancel()
                    await write(_revoked())
                    return
                finally:
                    if entry is not None:
                        entry.waiting = False
                if item is None:
                    turn = await self.servicer.GetTurn(
                        turns_pb2.GetTurnRequest(turn_id=turn_id), context
                    )
                    state = turns_pb2.TurnState.Name(turn.turn.state).removeprefix("TURN_STATE_")
                    await write(frame("end", {"turnId": turn_id, "state": state, "seq": last_seq}))
                    return
                if isinstance(item, BaseException):
                    code, message = status_for(item)
                    await write(frame("error", {"code": connect_code(code), "message": message}))
                    return
                seq, _, data = item.partition(b"\n")
                if seq != b"-":
                    last_seq = int(seq)
                await write(data)
        except ConnectionResetError:
            # The browser went away: nothing to answer.
            pass
        except _Stalled:
            # A client that does not read is dropped; what it has not taken is freed
            # with its socket, and it resumes from its Last-Event-ID.
            log.info(
                "SSE of turn %s: the client took nothing for %g s; dropped it (it resumes "
                "after seq %d with Last-Event-ID)",
                turn_id,
                self.write_timeout,
                last_seq,
            )
            self.dropped += 1
            self.dropped_event.set()
            if transport is not None:
                transport.abort()
        finally:
            self.held.pop(key, None)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class _Stalled(Exception):
    """The client took nothing for the write timeout."""


def _revoked() -> bytes:
    code, message = status_for(
        Unauthenticated("the bearer token was revoked; this stream is closed")
    )
    return frame("error", {"code": connect_code(code), "message": message})
