"""Wake-ups for WatchTurn streams: a waiter per stream, keyed by turn_id.

A stream registers its waiter *before* it reads, then waits; a commit touching the
turn sets every waiter of that turn. Reading after registering means a commit can
never slip between the read and the wait unnoticed.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict


class TurnNotifier:
    def __init__(self) -> None:
        self._waiters: defaultdict[str, set[asyncio.Event]] = defaultdict(set)

    def register(self, turn_id: str) -> asyncio.Event:
        event = asyncio.Event()
        self._waiters[turn_id].add(event)
        return event

    def unregister(self, turn_id: str, event: asyncio.Event) -> None:
        waiters = self._waiters.get(turn_id)
        if waiters is not None:
            waiters.discard(event)
            if not waiters:
                del self._waiters[turn_id]

    def notify(self, turn_id: str) -> None:
        for event in self._waiters.get(turn_id, ()):
            event.set()

    def changed(self, turn_id: str | None) -> None:
        """A change made through another replica; None: any turn may have changed
        (notifications were missed while reconnecting), so every stream re-reads."""
        if turn_id is not None:
            self.notify(turn_id)
            return
        for waiters in self._waiters.values():
            for event in waiters:
                event.set()

    def watchers(self) -> int:
        return sum(len(w) for w in self._waiters.values())
