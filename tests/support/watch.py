"""Consume a WatchTurn stream as a browser would: a reset clears the view."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.engine import watch


@dataclass
class Watcher:
    """Applies WatchTurn frames in a background task and records them."""

    frames: list[turns_pb2.WatchTurnResponse] = field(default_factory=list)
    shown: list[tuple[int, str, str]] = field(default_factory=list)
    resets: int = 0
    task: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def start(
        self, stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str, after_seq: int = 0
    ) -> None:
        self.task = asyncio.create_task(self._run(stub, turn_id, after_seq))

    async def _run(
        self, stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str, after_seq: int
    ) -> None:
        call = stub.WatchTurn(turns_pb2.WatchTurnRequest(turn_id=turn_id, after_seq=after_seq))
        async for frame in call:
            self.frames.append(frame)
            if frame.HasField("reset"):
                self.resets += 1
                self.shown.clear()
            else:
                e = frame.event
                self.shown.append((e.seq, e.type, e.data_json))
            self._changed.set()

    async def wait_for(self, predicate: object, timeout: float | None = None) -> None:
        async def loop() -> None:
            while not predicate():  # type: ignore[operator]
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout)

    async def finished(self, timeout: float | None = None) -> None:
        assert self.task is not None
        await asyncio.wait_for(self.task, timeout)


def seqs(shown: list[tuple[int, str, str]]) -> list[int]:
    return [s for s, _, _ in shown]


__all__ = ["Watcher", "aio", "seqs"]


def first_read(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """An event set once a WatchTurn stream's tail has made its first journal read
    (any stream's, in this process): what a test changes the turn after, to land it
    between the stream's position and its first page."""
    read = asyncio.Event()
    original = watch._Tail._read

    async def told(self: watch._Tail, cursor: int) -> Any:
        try:
            return await original(self, cursor)
        finally:
            read.set()

    monkeypatch.setattr(watch._Tail, "_read", told)
    return read
