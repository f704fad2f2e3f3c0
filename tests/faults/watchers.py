"""Watchers of a turn and what they showed: the panel's follower
(:class:`~turnkeeper.panel.follower.TurnFollower` with its :class:`Transcript`), and raw
WatchTurn streams checked frame by frame.

A :class:`Shown` applies frames as a browser does (a reset clears the view) and
notes, as they come, what must never happen: an event that is not the next seq
(a gap or a repeat), anything after the terminal event. It also keeps every
event it ever showed, so the end-of-round checks can tell whether an event that
is gone now was rewound away or lost.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import grpc
from grpc import aio
from turnkeeper.panel.follower import (
    ConclusionReason,
    Event,
    Frame,
    Reset,
    Transcript,
)
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

TERMINAL = frozenset({"turn.done", "turn.failed"})

# (seq, attempt, type, data as canonical JSON): one event, comparable everywhere.
Shape = tuple[int, int, str, str]


def canonical(data: Any) -> str:
    return json.dumps(data, sort_keys=True)


def shape_of(event: turns_pb2.Event) -> Shape:
    data = json.loads(event.data_json) if event.data_json else None
    return (event.seq, event.attempt, event.type, canonical(data))


@dataclass
class Shown:
    """What one watcher shows, checked frame by frame."""

    name: str
    # The seq the first event must have (after_seq + 1), until the first reset.
    next_seq: int = 1
    events: list[Shape] = field(default_factory=list)
    ever: set[Shape] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    resets: int = 0
    terminal: bool = False

    def reset(self) -> None:
        self.resets += 1
        self.events.clear()
        self.next_seq = 1
        self.terminal = False

    def event(self, shape: Shape) -> None:
        seq, _, type_, _ = shape
        if self.terminal:
            self.problems.append(f"{self.name}: seq {seq} ({type_}) after the terminal event")
        if seq != self.next_seq:
            what = "a repeat" if seq < self.next_seq else "a gap"
            self.problems.append(f"{self.name}: seq {seq} where {self.next_seq} was due ({what})")
        self.next_seq = seq + 1
        self.events.append(shape)
        self.ever.add(shape)
        self.terminal = type_ in TERMINAL

    def terminals(self) -> int:
        return sum(1 for _, _, t, _ in self.events if t in TERMINAL)


@dataclass
class Followed:
    """The follower's side: its Transcript and the same frames checked."""

    shown: Shown
    transcript: Transcript = field(default_factory=Transcript)
    interrupted: asyncio.Event = field(default_factory=asyncio.Event)

    def apply(self, frame: Frame) -> None:
        self.transcript.apply(frame)
        if isinstance(frame, Reset):
            self.shown.reset()
        elif isinstance(frame, Event):
            self.shown.event((frame.seq, frame.attempt, frame.type, canonical(frame.data)))
            if frame.type == "interrupt":
                self.interrupted.set()

    @property
    def reason(self) -> ConclusionReason | None:
        concluded = self.transcript.concluded
        return concluded.reason if concluded is not None else None


# The ends of a stream that are the service going away, not a verdict on the turn.
_CUT = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


@dataclass
class RawWatch:
    """One WatchTurn stream, no reconnect: it ends at the terminal event (at once
    when it joined a turn that was over after ``after_seq``), or is cut (the
    service was killed), or is cancelled (the turn stayed parked)."""

    shown: Shown
    after_seq: int = 0
    ended: bool = False
    cut: str = ""
    task: asyncio.Task[None] | None = None

    def start(self, stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str) -> None:
        self.shown.next_seq = self.after_seq + 1
        self.task = asyncio.create_task(self._run(stub, turn_id))

    async def _run(self, stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str) -> None:
        call = stub.WatchTurn(turns_pb2.WatchTurnRequest(turn_id=turn_id, after_seq=self.after_seq))
        try:
            async for frame in call:
                if frame.HasField("reset"):
                    self.shown.reset()
                else:
                    self.shown.event(shape_of(frame.event))
        except aio.AioRpcError as err:
            self.cut = f"{err.code().name}: {err.details()}"
            if err.code() not in _CUT:
                self.shown.problems.append(f"{self.shown.name}: stream failed with {self.cut}")
            return
        finally:
            call.cancel()
        self.ended = True  # without a terminal event only if it joined after the end

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
