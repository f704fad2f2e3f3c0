"""Following one turn the way a panel does (docs/architecture.md §3 and §8).

    async with TurnFollower(client, turn_id) as follower:
        transcript = Transcript()
        async for frame in follower:
            transcript.apply(frame)      # or render it: Event, Reset, Concluded
        # transcript.events: what the turn finally said; transcript.concluded: why it ended

A :class:`TurnFollower` yields typed frames:

- :class:`Event`: a retained event, in seq order, each exactly once since the last
  reset;
- :class:`Reset`: drop every event shown so far; the events that follow replay the
  turn's retained events from seq 1;
- :class:`Concluded`: always the last frame; says why following ended and the turn's
  state.

What it promises:

- A consumer that clears what it shows on every ``Reset`` never shows a duplicated
  tool call or reply, and after the terminal event shows exactly the turn's retained
  events.
- It never takes silence for the end. On every idle gap (no frame for
  ``idle_gap`` seconds) it asks TurnStatus: RUNNING or PARKED, or a service it cannot
  reach, means keep waiting; DONE, FAILED or UNKNOWN conclude. An overall
  ``deadline`` ends it whatever TurnStatus says.
- A dropped stream (UNAVAILABLE, a service restart ...) is re-opened with backoff
  after the last event shown. The re-opened stream overlaps by one event, and the
  follower checks that this event is still the one it showed (same seq, same
  attempt). If it is not, the turn was rewound while no stream was open: the
  follower emits a reset of its own (``Reset.local``) and replays from seq 1. An idle
  gap whose TurnStatus shows fewer events than were shown (``last_seq`` went back)
  means the same.
- A status call can overtake the stream: the service's reset (or a finished turn's
  last events) may be on its way on the open stream when TurnStatus already shows
  the rewind (or the end). While a stream is open, the follower leaves it one more
  idle gap to bring them, and only then resets on its own (or reads the rest with
  ListEvents): the service's reset keeps the events before the boundary on screen.

What it does not promise: events of an attempt that was rewound away may never be
shown (they are deleted), and a reset of the follower's own may come where the
service would not have needed one.
"""

from __future__ import annotations

import asyncio
import enum
import json
import math
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Final, Self, TypeAlias

import grpc

from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import TurnkeeperError, TurnNotFound
from turnkeeper.states import TERMINAL_EVENT_TYPES, TurnState
from turnkeeper.v1 import turns_pb2

__all__ = [
    "TERMINAL_EVENT_TYPES",
    "Concluded",
    "ConclusionReason",
    "Event",
    "FollowOptions",
    "Frame",
    "Reset",
    "Transcript",
    "TurnFollower",
    "TurnState",
    "is_transient",
]

#: The event types the service writes last (docs/architecture.md §3).

# Errors after which the same call can work later: the service or the network is
# down or restarting. Anything else (INVALID_ARGUMENT, PERMISSION_DENIED ...) is a
# mistake that waiting does not fix, and is raised to the consumer.
_TRANSIENT: Final = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)


def is_transient(err: TurnkeeperError) -> bool:
    """True for an error that says "not reachable right now", not "wrong"."""
    return err.code in _TRANSIENT


@dataclass(frozen=True, slots=True)
class Event:
    """One retained event of the turn."""

    seq: int
    #: The attempt (execution) that wrote it: 0 for the first, +1 per re-drive.
    attempt: int
    #: token, tool_call_start, tool_call_end, step, interrupt, final, error, turn.done ...
    type: str
    #: The event's JSON data, decoded.
    data: Any = None
    created_at: datetime | None = None

    @property
    def terminal(self) -> bool:
        return self.type in TERMINAL_EVENT_TYPES

    @classmethod
    def from_proto(cls, event: turns_pb2.Event) -> Event:
        return cls(
            seq=event.seq,
            attempt=event.attempt,
            type=event.type,
            data=json.loads(event.data_json) if event.data_json else None,
            created_at=event.created_at.ToDatetime() if event.HasField("created_at") else None,
        )


@dataclass(frozen=True, slots=True)
class Reset:
    """Drop every event shown so far: the events that follow replay from seq 1."""

    #: The boundary the turn was rewound to (events up to it survive the rewind);
    #: None when the follower found the rewind itself (``local``).
    seq: int | None = None
    #: The attempt that continues the turn, when known.
    attempt: int | None = None
    checkpoint_id: str = ""
    #: True when the follower, not the service, decided on this reset: the turn was
    #: rewound while no stream was open.
    local: bool = False


class ConclusionReason(enum.Enum):
    #: The turn's terminal event (turn.done / turn.failed) was the last Event.
    TERMINAL_EVENT = "terminal_event"
    #: TurnStatus said DONE, FAILED or UNKNOWN on an idle gap.
    STATUS = "status"
    #: The overall deadline passed first, whatever the turn's state.
    DEADLINE = "deadline"


@dataclass(frozen=True, slots=True)
class Concluded:
    """The last frame: why following ended."""

    reason: ConclusionReason
    #: The turn's state as last learned; None when it never was (a deadline passed
    #: while the service could not be reached).
    state: TurnState | None
    #: The turn's error, when it FAILED.
    error: str = ""


Frame: TypeAlias = Event | Reset | Concluded


@dataclass(frozen=True, slots=True)
class FollowOptions:
    """How patient a follower is. Times in seconds."""

    #: No frame for this long: ask TurnStatus (the panel's rule).
    idle_gap: float = 5.0
    #: End following after this long, whatever TurnStatus says.
    deadline: float = 15 * 60.0
    #: Deadline of one TurnStatus / ListEvents call.
    call_timeout: float = 5.0
    #: Pause before re-opening a dropped stream, doubled per failure up to the max.
    reconnect_initial: float = 0.05
    reconnect_max: float = 2.0

    def __post_init__(self) -> None:
        for name in ("idle_gap", "deadline", "call_timeout", "reconnect_initial", "reconnect_max"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")


@dataclass
class Transcript:
    """What a consumer shows: the events since the last reset, and how it ended."""

    events: list[Event] = field(default_factory=list)
    resets: int = 0
    concluded: Concluded | None = None

    def apply(self, frame: Frame) -> None:
        if isinstance(frame, Reset):
            self.events.clear()
            self.resets += 1
        elif isinstance(frame, Event):
            self.events.append(frame)
        else:
            self.concluded = frame

    def extend(self, frames: Iterable[Frame]) -> None:
        for frame in frames:
            self.apply(frame)

    @property
    def finished(self) -> bool:
        return self.concluded is not None

    def content(self) -> list[tuple[int, str, Any]]:
        """(seq, type, data) of each event: what a person sees, without the attempt
        and time that differ between two runs of the same turn."""
        return [(e.seq, e.type, e.data) for e in self.events]


# What the stream reader hands the follower: a frame, or the end of the stream.
@dataclass(frozen=True, slots=True)
class _Ended:
    error: BaseException | None


_Item: TypeAlias = turns_pb2.WatchTurnResponse | _Ended


class TurnFollower:
    """Follows one turn; iterate it (once) for its frames.

    The follower uses ``client`` but does not close it. Use ``async with`` (or call
    :meth:`aclose`) so that a consumer that stops early does not leave the stream
    open.
    """

    def __init__(
        self,
        client: AsyncTurnkeeperClient,
        turn_id: str,
        options: FollowOptions | None = None,
    ) -> None:
        self.client = client
        self.turn_id = turn_id
        self.options = options if options is not None else FollowOptions()
        self._frames: AsyncGenerator[Frame, None] | None = None
        # (seq, attempt) of the last event shown since the last reset; (0, -1): none.
        self._last: tuple[int, int] = (0, -1)
        self._state: TurnState | None = None
        self._reader: asyncio.Task[None] | None = None
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        # Set when a re-opened stream must start with the last event shown.
        self._verify: tuple[int, int] | None = None
        # Set when an idle gap left what TurnStatus showed to the open stream.
        self._waited_for_stream = False

    def __aiter__(self) -> AsyncIterator[Frame]:
        if self._frames is None:
            self._frames = self._follow()
        return self._frames

    async def aclose(self) -> None:
        """Stop following and close the stream. Safe to call twice."""
        if self._frames is not None:
            await self._frames.aclose()
        await self._stop_reader()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def run(self, transcript: Transcript | None = None) -> Transcript:
        """Follow to the end, applying every frame to ``transcript`` (a new one by
        default), and return it."""
        transcript = transcript if transcript is not None else Transcript()
        async for frame in self:
            transcript.apply(frame)
        return transcript

    # -- the loop --------------------------------------------------------------------

    async def _follow(self) -> AsyncGenerator[Frame, None]:
        opts = self.options
        loop = asyncio.get_running_loop()
        deadline_at = loop.time() + opts.deadline
        backoff = opts.reconnect_initial
        reconnect_at: float | None = None
        idle_since = loop.time()
        self._open()
        try:
            while True:
                now = loop.time()
                if now >= deadline_at:
                    yield Concluded(ConclusionReason.DEADLINE, self._state)
                    return
                if reconnect_at is not None and now >= reconnect_at:
                    reconnect_at = None
                    self._open()
                wake = min(deadline_at, idle_since + opts.idle_gap, reconnect_at or math.inf)
                try:
                    item = await asyncio.wait_for(self._queue.get(), max(0.0, wake - now))
                except TimeoutError:
                    if loop.time() < idle_since + opts.idle_gap:
                        continue  # the deadline or a reconnect is due: the top handles it
                    frames = await self._on_idle(deadline_at)
                    idle_since = loop.time()
                    for frame in frames:
                        yield frame
                        if isinstance(frame, Concluded):
                            return
                    continue

                idle_since = loop.time()
                if isinstance(item, _Ended):
                    await self._stop_reader()
                    frames = await self._on_stream_end(item.error, deadline_at)
                    for frame in frames:
                        yield frame
                        if isinstance(frame, Concluded):
                            return
                    if self._reader is None:
                        reconnect_at = loop.time() + backoff
                        backoff = min(backoff * 2, opts.reconnect_max)
                    continue

                backoff = opts.reconnect_initial
                for frame in await self._on_frame(item):
                    yield frame
                    if isinstance(frame, Concluded):
                        return
        finally:
            await self._stop_reader()

    async def _on_frame(self, response: turns_pb2.WatchTurnResponse) -> list[Frame]:
        self._waited_for_stream = False
        if response.HasField("reset"):
            r = response.reset
            self._last = (0, -1)
            self._verify = None
            return [Reset(seq=r.seq, attempt=r.attempt, checkpoint_id=r.checkpoint_id)]
        event = Event.from_proto(response.event)
        if self._verify is not None:
            expected, self._verify = self._verify, None
            if (event.seq, event.attempt) == expected:
                return []  # the overlap: still the event we showed
            return await self._resync()
        if event.seq != self._last[0] + 1:
            # Not the next event: never expected from the service, but what we show
            # must stay exact, so start over rather than show a gap or a repeat.
            return await self._resync()
        self._last = (event.seq, event.attempt)
        if event.terminal:
            ended = {"turn.done": TurnState.DONE, "turn.cancelled": TurnState.CANCELLED}
            self._state = ended.get(event.type, TurnState.FAILED)
            error = ""
            if self._state is TurnState.FAILED and isinstance(event.data, dict):
                error = str(event.data.get("error", ""))
            return [event, Concluded(ConclusionReason.TERMINAL_EVENT, self._state, error)]
        return [event]

    async def _on_stream_end(self, error: BaseException | None, deadline_at: float) -> list[Frame]:
        """The stream ended before the terminal event. A transient error (or a stream
        the service closed) is re-opened later; an unknown turn concludes; anything
        else is the consumer's to handle."""
        if error is None or (isinstance(error, TurnkeeperError) and is_transient(error)):
            return []
        if isinstance(error, TurnNotFound):
            # WatchTurn says NOT_FOUND for an id the journal never saw; TurnStatus
            # has the last word (it answers UNKNOWN, or the turn appeared meanwhile).
            return await self._on_idle(deadline_at)
        raise error

    async def _on_idle(self, deadline_at: float) -> list[Frame]:
        """The panel's rule: ask TurnStatus instead of assuming."""
        timeout = self._call_timeout(deadline_at)
        if timeout <= 0:
            return []
        try:
            status = await self.client.turn_status(
                turns_pb2.TurnStatusRequest(turn_id=self.turn_id), timeout=timeout
            )
        except TurnkeeperError as err:
            if is_transient(err):
                return []  # unreachable: keep waiting
            raise
        state = TurnState.from_proto(status.state)
        self._state = state
        if state.live:
            if status.last_seq < self._last[0]:
                # Fewer events retained than we showed: rewound while no stream was
                # open (or before the open one started), or the open stream's reset
                # is still on its way.
                return [] if self._leave_to_stream() else await self._resync()
            return []
        if state is TurnState.UNKNOWN:
            return [Concluded(ConclusionReason.STATUS, state)]
        if self._leave_to_stream():
            return []  # the open stream brings the turn's last events and its end
        # DONE or FAILED: its events are final now. Show what the stream did not.
        frames, complete = await self._catch_up(deadline_at)
        if not complete:
            # The service went away mid-way (a replica dying, its database
            # restarting): concluding now would leave the transcript short. The next
            # idle gap asks again and carries on from the last event shown.
            return frames
        return [*frames, Concluded(ConclusionReason.STATUS, state, status.error)]

    def _leave_to_stream(self) -> bool:
        """Whether to leave what TurnStatus just showed to the open stream for one
        more idle gap (the module docstring): once, and only while a stream is open."""
        if self._reader is None or self._reader.done() or self._waited_for_stream:
            return False
        self._waited_for_stream = True
        return True

    async def _catch_up(self, deadline_at: float) -> tuple[list[Frame], bool]:
        """The retained events after the last one shown, of a turn that has ended
        (so nothing rewinds it any more), by ListEvents; and whether they were all
        read. A service that cannot be reached (or the deadline) stops it short:
        what was read is shown, the rest is read on another try."""
        await self._stop_reader()
        frames: list[Frame] = []
        verify: tuple[int, int] | None = self._last if self._last[0] > 0 else None
        after = self._last[0] - 1 if verify is not None else 0
        try:
            while True:
                page = await self.client.list_events(
                    turns_pb2.ListEventsRequest(turn_id=self.turn_id, after_seq=after),
                    timeout=self._call_timeout(deadline_at),
                )
                if not page.events:
                    return frames, True
                for proto in page.events:
                    event = Event.from_proto(proto)
                    after = event.seq
                    if verify is not None:
                        expected, verify = verify, None
                        if (event.seq, event.attempt) == expected:
                            continue
                        frames.append(Reset(local=True))
                        self._last = (0, -1)
                        after = 0
                        break
                    if event.seq != self._last[0] + 1:
                        return frames, True  # cannot be shown exactly: stop here
                    frames.append(event)
                    self._last = (event.seq, event.attempt)
        except TurnkeeperError as err:
            if is_transient(err):
                return frames, False
            return frames, True

    async def _resync(self) -> list[Frame]:
        """A reset of our own, then a fresh stream from seq 1."""
        await self._stop_reader()
        self._last = (0, -1)
        self._verify = None
        self._open()
        return [Reset(local=True)]

    # -- the stream ----------------------------------------------------------------

    def _open(self) -> None:
        """Start a stream after the last event shown, overlapping it by one."""
        seq, attempt = self._last
        self._verify = (seq, attempt) if seq > 0 else None
        self._waited_for_stream = False
        after_seq = seq - 1 if seq > 0 else 0
        self._queue = asyncio.Queue()
        self._reader = asyncio.create_task(
            self._pump(after_seq, self._queue), name=f"watch-turn:{self.turn_id}"
        )

    async def _pump(self, after_seq: int, queue: asyncio.Queue[_Item]) -> None:
        request = turns_pb2.WatchTurnRequest(turn_id=self.turn_id, after_seq=after_seq)
        try:
            async for response in self.client.watch_turn(request):
                queue.put_nowait(response)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # handed to the loop, which decides
            queue.put_nowait(_Ended(err))
        else:
            queue.put_nowait(_Ended(None))

    async def _stop_reader(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None and not reader.done():
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    def _call_timeout(self, deadline_at: float) -> float:
        left = deadline_at - asyncio.get_running_loop().time()
        return min(self.options.call_timeout, left)
