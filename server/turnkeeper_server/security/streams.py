"""The open response streams (WatchTurn) of each caller, so that revoking a token
ends them: a revoked token must not keep reading a turn it opened before."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from turnkeeper_server.security.auth import Caller


@dataclass(eq=False)
class OpenStream:
    caller: Caller
    task: asyncio.Task[object] | None
    # Awaiting the servicer's next response: a cancel lands in the stream's own code
    # (and not in grpc's write of a response already yielded).
    waiting: bool = False
    revoked: bool = False


@dataclass
class OpenStreams:
    _open: set[OpenStream] = field(default_factory=set)

    def __len__(self) -> int:
        return len(self._open)

    @contextlib.contextmanager
    def hold(self, caller: Caller) -> Iterator[OpenStream]:
        entry = OpenStream(caller, asyncio.current_task())
        self._open.add(entry)
        try:
            yield entry
        finally:
            self._open.discard(entry)

    def end(self, still_valid: Callable[[Caller], bool]) -> int:
        """Mark the streams whose caller is no longer valid; a stream waiting for
        its next response is cancelled now, one being written checks before its
        next. Returns how many were ended."""
        ended = 0
        for entry in list(self._open):
            if entry.revoked or still_valid(entry.caller):
                continue
            entry.revoked = True
            ended += 1
            if entry.waiting and entry.task is not None:
                entry.task.cancel()
        return ended
