"""How often the outbox publisher looks at the outbox (messaging/outbox.py): once per
wake when the look takes less than a batch and no commit wrote rows meanwhile
(decision 442), again at once when one did, so no row waits for the idle poll."""

from __future__ import annotations

import asyncio
from typing import Any

from turnkeeper_server.messaging.outbox import OutboxPublisher
from turnkeeper_server.store.records import OutboxRow


class Link:
    enabled = True
    connected = True

    def __init__(self) -> None:
        self.published: list[int] = []
        self.publishing: asyncio.Event | None = None
        self.release = asyncio.Event()
        self.release.set()

    async def publish_batch(self, rows: list[OutboxRow]) -> bool:
        if self.publishing is not None:
            self.publishing.set()
        await self.release.wait()
        self.published += [row.id for row in rows]
        return True


class Outbox:
    """The store's outbox: rows past the last published, and the looks at it."""

    def __init__(self) -> None:
        self.rows: list[OutboxRow] = []
        self.looks = 0
        self.last_id = 0

    def add(self, n: int) -> None:
        for _ in range(n):
            self.last_id += 1
            self.rows.append(OutboxRow(self.last_id, "s", b"{}", None, 1))

    async def drain_outbox(self, limit: int, publish: Any) -> int:
        self.looks += 1
        rows, self.rows = self.rows[:limit], self.rows[limit:]
        if not rows or not await publish(rows):
            self.rows = rows + self.rows
            return 0
        return len(rows)


async def test_a_wake_costs_one_look_and_a_commit_during_the_publish_another() -> None:
    db, link = Outbox(), Link()
    publisher = OutboxPublisher(db, link, idle_poll=600)  # type: ignore[arg-type]
    await publisher.start()
    try:
        await asyncio.wait_for(publisher.wait_drained(), 10)
        looks = db.looks
        db.add(3)
        publisher.wake()
        await asyncio.wait_for(publisher.wait_drained(), 10)
        assert link.published == [1, 2, 3]
        # One look took the three rows: none after it only to find the outbox empty.
        assert db.looks == looks + 1
        # A commit while a batch is being published: its rows go at once, not at
        # the idle poll (600 s here).
        link.publishing, link.release = asyncio.Event(), asyncio.Event()
        db.add(2)
        publisher.wake()
        await asyncio.wait_for(link.publishing.wait(), 10)
        db.add(1)
        publisher.wake()
        link.publishing = None
        link.release.set()
        await asyncio.wait_for(publisher.wait_drained(), 10)
        assert link.published == [1, 2, 3, 4, 5, 6]
    finally:
        await publisher.stop()


class SlowLook(Outbox):
    """A look that awaits (PostgreSQL's runs in a thread): `looking` is set while one
    is under way, and it answers once `answer` is set, with what it saw at its start."""

    def __init__(self) -> None:
        super().__init__()
        self.looking = asyncio.Event()
        self.answer = asyncio.Event()
        self.answer.set()

    async def drain_outbox(self, limit: int, publish: Any) -> int:
        self.looks += 1
        rows, self.rows = self.rows[:limit], self.rows[limit:]
        self.looking.set()
        await self.answer.wait()
        if not rows or not await publish(rows):
            self.rows = rows + self.rows
            return 0
        return len(rows)


async def test_a_commit_during_a_look_that_finds_nothing_is_not_taken_for_drained() -> None:
    # A look that began before a commit finds none of its rows; the commit's wake
    # came meanwhile, so the outbox is not drained: wait_drained waits for its rows
    # (it returned with a backlog of 1 on PostgreSQL, whose look awaits a thread).
    db, link = SlowLook(), Link()
    publisher = OutboxPublisher(db, link, idle_poll=600)  # type: ignore[arg-type]
    await publisher.start()
    try:
        await asyncio.wait_for(publisher.wait_drained(), 10)
        db.looking.clear()
        db.answer.clear()
        publisher.wake()  # a look begins, and is held before it answers
        await asyncio.wait_for(db.looking.wait(), 10)
        db.add(1)
        publisher.wake()  # the commit's wake, while the look is out
        link.publishing, link.release = asyncio.Event(), asyncio.Event()
        db.answer.set()
        drained = asyncio.ensure_future(publisher.wait_drained())
        # The next look takes the row; until it is published, nothing is drained.
        await asyncio.wait_for(link.publishing.wait(), 10)
        assert not drained.done()
        link.release.set()
        await asyncio.wait_for(drained, 10)
        assert (link.published, db.rows) == ([1], [])
    finally:
        link.release.set()
        await publisher.stop()
