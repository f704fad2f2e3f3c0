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
and replays from seq 1, so no stale event stays on the page; a rewind after that
check, before the watch's first read, is the watch's own reset (decision 650). The stream is the watch
operation gRPC's WatchTurn serves (operations/turns.py), so rights, quotas and frames
are WatchTurn's own; the pump (pump.py) holds the quota before the response starts,
so a client over it is answered 429, and ends the stream with an `error` frame
(UNAUTHENTICATED) when a token reload revokes its token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from typing import Any, Final

from aiohttp import web
from turnkeeper.v1 import turns_pb2

from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument, Unauthenticated, status_for
from turnkeeper_server.operations.turns import TurnOperations
from turnkeeper_server.security.auth import TokenStore
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import connect_code, error_response, to_json
from turnkeeper_server.web.pump import BUFFER_BYTES, Frame, Pump

__all__ = ["BUFFER_BYTES", "EventStream", "event_data", "frame", "resume_point", "watch_frame"]


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
    return lim.check_seq("Last-Event-ID", after), attempt


class EventStream:
    """The handler of GET /v1/turns/{turn_id}/events."""

    def __init__(self, operations: TurnOperations, tokens: TokenStore | None, pump: Pump) -> None:
        self.operations = operations
        self.tokens = tokens
        self.pump = pump

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        turn_id = request.match_info["turn_id"]
        # WatchTurn's quota, held before the stream's 200: a client over it is
        # answered 429 (decision 187).
        quota = contextlib.ExitStack()
        try:
            caller = web_auth.caller_of(request, self.tokens)
            after, attempt = resume_point(request)
            with web_auth.acting_as(caller):
                web_auth.require("WatchTurn")
                # The read validates the id and answers NOT_FOUND for an unknown turn
                # (and for another agent's, to an agent token) before the stream opens.
                got = self.operations.get(turns_pb2.GetTurnRequest(turn_id=turn_id))
                start, local_reset = self._start(got.turn, after, attempt)
                quota.enter_context(self.pump.admit(request))
        except Exception as exc:
            quota.close()
            return error_response(exc)
        with quota:
            response, _ = await self.pump.serve(
                request,
                caller,
                # The resume's attempt goes on with it: a rewind after the check
                # above is still the stream's reset (engine/watch.py, decision 650).
                self._frames(turn_id, start, attempt if start > 0 else None),
                _TurnFraming(self.operations, turn_id),
                name=f"SSE of turn {turn_id}",
                after=start,
                preamble=local_reset,
            )
        return response

    def _start(
        self, turn: turns_pb2.Turn, after: int, attempt: int | None
    ) -> tuple[int, bytes | None]:
        """Where the watch starts, and a reset of our own when the resume point is no
        longer what the page showed (the turn was rewound while it was away)."""
        if after == 0:
            return 0, None
        stale = after > turn.last_seq
        if not stale and attempt is not None:
            listed = self.operations.list_events(
                turns_pb2.ListEventsRequest(turn_id=turn.turn_id, after_seq=after - 1, page_size=1)
            )
            shown = [e for e in listed.events if e.seq == after]
            stale = not shown or shown[0].attempt != attempt
        if not stale:
            return after, None
        reset = {"seq": 0, "attempt": turn.attempts, "checkpointId": "", "local": True}
        return 0, frame("reset", reset, id=0)

    async def _frames(
        self, turn_id: str, after: int, attempt: int | None
    ) -> AsyncGenerator[Frame, None]:
        watch = self.operations.watch(
            turns_pb2.WatchTurnRequest(turn_id=turn_id, after_seq=after), after_attempt=attempt
        )
        async with contextlib.aclosing(watch) as items:
            async for item in items:
                seq = item.event.seq if item.HasField("event") else None
                yield Frame(watch_frame(item), seq)

    # What the streams hold and drop (pump.py), for the slow-reader tests and metrics.
    @property
    def held(self) -> dict[int, int]:
        return self.pump.held

    @property
    def peak_held(self) -> int:
        return self.pump.peak_held

    @property
    def dropped(self) -> int:
        return self.pump.dropped

    @property
    def dropped_event(self) -> asyncio.Event:
        return self.pump.dropped_event


class _TurnFraming:
    """This stream's own frames besides the events (the module docstring)."""

    heartbeat: Final = b": keep-alive\n\n"

    def __init__(self, operations: TurnOperations, turn_id: str) -> None:
        self.operations = operations
        self.turn_id = turn_id

    def revoked(self) -> bytes:
        return self.failed(Unauthenticated("the bearer token was revoked; this stream is closed"))

    def failed(self, exc: Exception) -> bytes:
        code, message = status_for(exc)
        return frame("error", {"code": connect_code(code), "message": message})

    async def ended(self, last_seq: int) -> bytes:
        turn = self.operations.get(turns_pb2.GetTurnRequest(turn_id=self.turn_id)).turn
        state = turns_pb2.TurnState.Name(turn.state).removeprefix("TURN_STATE_")
        return frame("end", {"turnId": self.turn_id, "state": state, "seq": last_seq})
