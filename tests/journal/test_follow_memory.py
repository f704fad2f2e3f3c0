"""Followers served from memory (engine/watch.py `_Tail`, decisions 440 and 540): a
wake whose news say what was committed (an append's events, a finish's or a park's
events and state, a root checkpoint's boundary) costs no read of the journal, and
the stream is still exactly the journal's: no event lost, none twice, in seq order,
across stale, out-of-order and wrong news, a rewind, a resume and a commit that
told no one. gRPC's WatchTurn (`follow`) is served the same way.

The news are made as the engine makes them (engine/turns.py `append`, `finish`,
`park`, engine/checkpoints.py): the append's `Written`, the finish's or park's
`Closed`, notified after its commit."""

from __future__ import annotations

import asyncio
import dataclasses
import types
from collections.abc import AsyncGenerator, Callable
from typing import Any

import pytest
from turnkeeper_server.engine import watch as watch_module
from turnkeeper_server.engine.checkpoints import Checkpoints
from turnkeeper_server.engine.turns import Turns
from turnkeeper_server.engine.watch import (
    NEWS_HELD,
    OWNED,
    Reset,
    Rewound,
    Settled,
    TurnNotifier,
    follow,
    follow_live,
    follow_settled,
)
from turnkeeper_server.journal import checkpoints, transitions
from turnkeeper_server.journal.transitions import Closed, Written
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.records import EventRecord, Fence, NewEvent

from tests.journal.conftest import POLICY, REPLICA, Journal
from tests.support.watch import first_read as watch_first_read

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(60)]

Item = EventRecord | Rewound | Reset


class Reads:
    """Counts the follower's reads of the journal (Store.read)."""

    def __init__(self, journal: Journal) -> None:
        self.count = 0
        db: Any = journal.db
        read = db.read

        async def counted(fn: Callable[[Any], Any]) -> Any:
            self.count += 1
            return await read(fn)

        db.read = counted


class Writer:
    """Commits as the engine does, and tells the notifier what it committed."""

    def __init__(self, journal: Journal, notifier: TurnNotifier) -> None:
        self.journal = journal
        self.notifier = notifier

    async def append(self, attempt: int, *types: str, tell: bool = True) -> Written:
        last = self.journal.turn("t1").last_seq
        batch: list[NewEvent] = [
            (last + i, t, f'{{"n": {last + i}}}') for i, t in enumerate(types, 1)
        ]
        written = await self.journal.write(
            lambda tx: transitions.append_events_written(
                tx, turn_id="t1", attempt=attempt, events=batch, policy=POLICY
            )
        )
        if tell:
            self.notifier.notify("t1", written)
        return written

    async def checkpoint(self, checkpoint_id: str, attempt: int) -> None:
        await self.journal.checkpoint("th1", checkpoint_id, Fence("t1", attempt))
        self.notifier.notify("t1", Settled(self.journal.boundary("t1")[1]))

    def batch(self, *types: str) -> list[NewEvent]:
        last = self.journal.turn("t1").last_seq
        return [(last + i, t, f'{{"n": {last + i}}}') for i, t in enumerate(types, 1)]

    async def finish(self, attempt: int, *types: str, tell: bool = False) -> Closed:
        """`tell`: the finish's news, as engine/turns.py gives it; else a wake that
        says nothing (as a cancel's or another replica's)."""
        batch = self.batch(*types)
        closed = await self.journal.write(
            lambda tx: transitions.finish_turn(
                tx,
                turn_id="t1",
                attempt=attempt,
                failed=False,
                error="",
                events=batch,
                policy=POLICY,
            )
        )
        self.notifier.notify("t1", closed if tell else None)
        return closed

    async def park(self, attempt: int, *types: str) -> Closed:
        batch = self.batch(*types)
        closed = await self.journal.write(
            lambda tx: transitions.park_turn(
                tx,
                turn_id="t1",
                attempt=attempt,
                interrupt_json="{}",
                events=batch,
                policy=POLICY,
            )
        )
        self.notifier.notify("t1", closed)
        return closed

    async def redrive(self) -> None:
        await self.journal.redrive("t1")
        self.notifier.notify("t1")


async def started(journal: Journal) -> tuple[TurnNotifier, Writer]:
    """Turn t1 of thread th1 started; the notifier, and a writer that tells it."""
    notifier = TurnNotifier()
    await journal.start("t1", "th1")
    return notifier, Writer(journal, notifier)


def live(
    journal: Journal, notifier: TurnNotifier, after_seq: int = 0, after_attempt: int | None = None
) -> AsyncGenerator[Item]:
    # Tokens go out at once; steps wait for their checkpoint (the LangGraph stream's rule).
    return follow_live(
        journal.db,
        notifier,
        Metrics(),
        "t1",
        after_seq,
        after_attempt=after_attempt,
        waits=lambda t: t != "token",
    )


def settled(journal: Journal, notifier: TurnNotifier) -> AsyncGenerator[Item]:
    async def follow() -> AsyncGenerator[Item]:
        async for event in follow_settled(journal.db, notifier, Metrics(), "t1", 0):
            yield event

    return follow()


def watch(
    journal: Journal, notifier: TurnNotifier, after_seq: int = 0, after_attempt: int | None = None
) -> AsyncGenerator[Item]:
    """gRPC WatchTurn's follower (the SSE's, with `after_attempt`)."""

    async def follows() -> AsyncGenerator[Item]:
        async for item in follow(
            journal.db, notifier, Metrics(), "t1", after_seq, after_attempt=after_attempt
        ):
            yield item

    return follows()


FOLLOWERS: dict[str, Callable[[Journal, TurnNotifier], AsyncGenerator[Item]]] = {
    "live": live,
    "settled": settled,
    "watch": watch,
}


class Reader:
    """Takes a follower's items as they come, in a task of its own."""

    def __init__(self, follow: AsyncGenerator[Item]) -> None:
        self.follow = follow
        self.items: asyncio.Queue[Item | None] = asyncio.Queue()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for item in self.follow:
            await self.items.put(item)
        await self.items.put(None)

    async def take(self, n: int) -> list[Item]:
        got: list[Item] = []
        for _ in range(n):
            item = await asyncio.wait_for(self.items.get(), 30)
            assert item is not None, f"the follow ended after {got}"
            got.append(item)
        return got

    async def rest(self) -> list[Item]:
        got: list[Item] = []
        while (item := await asyncio.wait_for(self.items.get(), 30)) is not None:
            got.append(item)
        return got


def seen(items: list[Item]) -> list[tuple[int, int, str]]:
    return [
        (i.seq, i.attempt, i.type)
        if isinstance(i, EventRecord)
        else (i.seq, -1, "REWOUND" if isinstance(i, Rewound) else "RESET")
        for i in items
    ]


@pytest.mark.parametrize("way", ["live", "settled", "watch"])
async def test_woken_by_news_the_follower_reads_nothing_and_misses_nothing(
    journal: Journal, way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No recheck comes in the test's time: every wake is a commit's.
    monkeypatch.setattr(watch_module, "SETTLED_RECHECK_SECONDS", 600.0)
    notifier, writer = await started(journal)
    reads = Reads(journal)
    await writer.append(0, "token")
    reader = Reader(FOLLOWERS[way](journal, notifier))
    if way == "settled":
        await writer.checkpoint("cp-0", 0)
    assert seen(await reader.take(1)) == [(1, 0, "token")]
    before = reads.count
    expected = [(1, 0, "token")]
    for step in range(3):
        await writer.append(0, "token", "token")
        await writer.append(0, "token")
        await writer.append(0, "step", "values")
        await writer.checkpoint(f"cp-{step + 1}", 0)
        last = journal.turn("t1").last_seq
        expected += [
            (s, 0, t)
            for s, t in zip(
                range(last - 4, last + 1), ["token"] * 3 + ["step", "values"], strict=True
            )
        ]
    got = [(1, 0, "token"), *seen(await reader.take(len(expected) - 1))]
    assert got == expected
    # Every wake came with news of what was committed: not one read.
    assert reads.count == before
    # The finish's news carry its last events and the end (decision 540).
    await writer.finish(0, "token", tell=True)
    n = len(expected)
    assert seen(await reader.rest()) == [(n + 1, 0, "token"), (n + 2, 0, "turn.done")]
    assert reads.count == before


async def test_stale_and_out_of_order_news_give_each_event_once_in_order(
    journal: Journal,
) -> None:
    notifier, writer = await started(journal)
    early = await writer.append(0, "token", "token", tell=False)
    reader = Reader(live(journal, notifier))
    assert seen(await reader.take(2)) == [(1, 0, "token"), (2, 0, "token")]
    # The news of what the follower already read arrives after its read.
    notifier.notify("t1", early)
    a = await writer.append(0, "token", tell=False)
    b = await writer.append(0, "token", "token", tell=False)
    # Told in the wrong order: the later commit's news first.
    notifier.notify("t1", b)
    notifier.notify("t1", a)
    notifier.notify("t1", early)
    assert seen(await reader.take(3)) == [(3, 0, "token"), (4, 0, "token"), (5, 0, "token")]
    await writer.append(0, "token")
    await writer.finish(0)
    assert seen(await reader.rest()) == [(6, 0, "token"), (7, 0, "turn.done")]


async def test_a_rewind_takes_back_what_memory_released_and_the_rerun_follows(
    journal: Journal,
) -> None:
    notifier, writer = await started(journal)
    await writer.append(0, "token", "step")
    await writer.checkpoint("cp-1", 0)  # boundary 2
    reader = Reader(live(journal, notifier))
    assert seen(await reader.take(2)) == [(1, 0, "token"), (2, 0, "step")]
    await writer.append(0, "token", "token")  # released from memory, past the boundary
    await writer.append(0, "step")  # held: its checkpoint never comes
    assert seen(await reader.take(2)) == [(3, 0, "token"), (4, 0, "token")]
    await writer.redrive()
    rewound = await reader.take(1)
    assert isinstance(rewound[0], Rewound)
    assert rewound[0].seq == 2
    assert [e.seq for e in rewound[0].taken] == [3, 4]
    await writer.append(1, "token", "step")
    await writer.checkpoint("cp-2", 1)
    await writer.finish(1)
    assert seen(await reader.rest()) == [(3, 1, "token"), (4, 1, "step"), (5, 1, "turn.done")]


async def test_a_resume_from_a_position_served_from_memory(journal: Journal) -> None:
    notifier, writer = await started(journal)
    reader = Reader(live(journal, notifier))
    await writer.append(0, "token", "token", "token")
    shown = await reader.take(2)
    reader.task.cancel()
    # The client saw seq 2 (attempt 0), went away, and comes back with its id.
    resumed = Reader(live(journal, notifier, after_seq=shown[-1].seq, after_attempt=0))
    assert seen(await resumed.take(1)) == [(3, 0, "token")]
    await writer.redrive()  # seq 1-3 taken back (no checkpoint: boundary 0)
    rewound = await resumed.take(1)
    assert isinstance(rewound[0], Rewound) and rewound[0].seq == 0
    await writer.append(1, "token")
    await writer.finish(1)
    assert seen(await resumed.rest()) == [(1, 1, "token"), (2, 1, "turn.done")]
    # A resume from a position the rewind took back starts with a Rewound of its own.
    late = [item async for item in live(journal, notifier, after_seq=3, after_attempt=0)]
    assert isinstance(late[0], Rewound) and late[0].seq == 0 and late[0].taken == ()
    assert seen(late[1:]) == [(1, 1, "token"), (2, 1, "turn.done")]


async def test_a_commit_that_told_no_one_is_read_at_the_recheck(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch_module, "SETTLED_RECHECK_SECONDS", 0.05)
    notifier, writer = await started(journal)
    reader = Reader(live(journal, notifier))
    await writer.append(0, "token")
    assert seen(await reader.take(1)) == [(1, 0, "token")]
    # A commit through another replica: no news here, not even a wake.
    await writer.append(0, "token", tell=False)
    await writer.append(0, "token")  # news that does not fit (seq 2 unknown): read
    assert seen(await reader.take(2)) == [(2, 0, "token"), (3, 0, "token")]
    await writer.append(0, "token", tell=False)
    assert seen(await reader.take(1)) == [(4, 0, "token")]
    await writer.finish(0)
    assert seen(await reader.rest()) == [(5, 0, "turn.done")]


async def test_news_past_what_a_follower_holds_make_it_read(journal: Journal) -> None:
    notifier = TurnNotifier()
    subscription = notifier.subscribe("t1")
    for n in range(NEWS_HELD):
        notifier.notify("t1", Settled(n))
    assert subscription.take() == ([Settled(n) for n in range(NEWS_HELD)], False)
    for n in range(NEWS_HELD + 1):
        notifier.notify("t1", Settled(n))
    assert subscription.take() == ([], True)
    notifier.changed(None)  # notifications from other replicas were missed
    assert subscription.take() == ([], True)


async def test_only_a_root_checkpoint_tells_its_boundary(journal: Journal) -> None:
    notifier = TurnNotifier()
    subscription = notifier.subscribe("t1")
    engine = Checkpoints(journal.db, notifier, POLICY)
    await journal.start("t1", "th1")
    await Writer(journal, notifier).append(0, "token", tell=False)
    root = journal.put("th1", "cp-1")
    await engine.write(checkpoints.CheckpointWrite(root, Fence("t1", 0)))
    assert subscription.take() == ([Settled(1)], False)
    inner = journal.put("th1", "cp-2")
    inner = dataclasses.replace(inner, checkpoint_ns="inner:1")
    await engine.write(checkpoints.CheckpointWrite(inner, Fence("t1", 0)))
    assert subscription.take() == ([], True)


async def test_a_claim_wakes_the_follower_without_a_read(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch_module, "SETTLED_RECHECK_SECONDS", 600.0)
    notifier, writer = await started(journal)
    reads = Reads(journal)
    reader = Reader(live(journal, notifier))
    await writer.append(0, "token")
    assert seen(await reader.take(1)) == [(1, 0, "token")]
    before = reads.count
    # The replica claims the turn (engine/turns.py: who runs it changed, nothing else).
    await journal.write(
        lambda tx: transitions.claim_turn(
            tx,
            turn_id="t1",
            attempt=0,
            replica=REPLICA[0],
            incarnation=REPLICA[1],
            policy=POLICY,
        )
    )
    notifier.notify("t1", OWNED)
    await writer.append(0, "token")
    assert seen(await reader.take(1)) == [(2, 0, "token")]
    assert reads.count == before
    await writer.finish(0)
    assert seen(await reader.rest()) == [(3, 0, "turn.done")]


@pytest.mark.parametrize("way", ["live", "settled", "watch"])
async def test_a_park_from_news_gives_its_events_without_a_read(
    journal: Journal, way: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch_module, "SETTLED_RECHECK_SECONDS", 600.0)
    notifier, writer = await started(journal)
    reads = Reads(journal)
    reader = Reader(FOLLOWERS[way](journal, notifier))
    await writer.append(0, "token")
    await writer.checkpoint("cp-1", 0)
    assert seen(await reader.take(1)) == [(1, 0, "token")]
    before = reads.count
    # The interrupt's step: held by the settled and live streams (no checkpoint
    # after it) until the park settles every event.
    await writer.park(0, "token", "step", "values")
    parked = [(2, 0, "token"), (3, 0, "step"), (4, 0, "values")]
    if way == "watch":
        # WatchTurn goes on past a park (the turn is not over).
        assert seen(await reader.take(3)) == parked
        reader.task.cancel()
    else:
        # The LangGraph streams end at the interrupt.
        assert seen(await reader.rest()) == parked
    assert reads.count == before


async def test_a_park_that_stores_no_event_is_read(journal: Journal) -> None:
    notifier, writer = await started(journal)
    reads = Reads(journal)
    reader = Reader(live(journal, notifier))
    await writer.append(0, "token", "step")
    assert seen(await reader.take(1)) == [(1, 0, "token")]  # the step waits to settle
    before = reads.count
    # Its news bring no event past what the follower holds: nothing tells them
    # from the news of a park it already read (and saw resumed), so it reads.
    await writer.park(0)
    assert seen(await reader.rest()) == [(2, 0, "step")]
    assert reads.count == before + 1


@pytest.mark.parametrize("way", ["live", "watch"])
async def test_a_park_read_before_its_news_came_is_not_taken(journal: Journal, way: str) -> None:
    notifier, writer = await started(journal)
    reader = Reader(FOLLOWERS[way](journal, notifier))
    await writer.append(0, "token")
    assert seen(await reader.take(1)) == [(1, 0, "token")]
    # Parked and resumed, both committed before the follower's next read, which
    # shows the turn running again; the park's news come after that read.
    quiet = Writer(journal, TurnNotifier())
    late = await quiet.park(0, "token")
    await journal.write(
        lambda tx: transitions.resume_detached(tx, turn_id="t1", resume_json="{}", policy=POLICY)
    )
    notifier.notify("t1")
    assert seen(await reader.take(1)) == [(2, 0, "token")]
    # Taken, they would end the live stream at a park that is over: refused, read.
    notifier.notify("t1", late)
    await writer.append(0, "token")
    await writer.finish(0, tell=True)
    assert seen(await reader.rest()) == [(3, 0, "token"), (4, 0, "turn.done")]


def broken(closed: Closed, how: str) -> Closed:
    """A finish's news made wrong, as a faulty writer would tell them."""
    if how == "gap":
        return dataclasses.replace(closed, events=closed.events[1:])
    if how == "short":
        return dataclasses.replace(closed, events=closed.events[:-1])
    assert how == "epoch"
    return dataclasses.replace(closed, turn=dataclasses.replace(closed.turn, rewinds=7))


# Each wrong kind once, each follower at least once (a database each is dear).
@pytest.mark.parametrize(
    ("how", "way"), [("gap", "live"), ("short", "settled"), ("epoch", "watch")]
)
async def test_wrong_news_of_a_finish_make_the_follower_read_the_journal(
    journal: Journal, way: str, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watch_module, "SETTLED_RECHECK_SECONDS", 600.0)
    notifier, writer = await started(journal)
    reads = Reads(journal)
    reader = Reader(FOLLOWERS[way](journal, notifier))
    await writer.append(0, "token")
    await writer.checkpoint("cp-1", 0)
    assert seen(await reader.take(1)) == [(1, 0, "token")]
    before = reads.count
    # A finish whose news do not fit what the follower holds: were they believed,
    # it would lose an event, end early or show one twice. It reads instead.
    real = Writer(journal, TurnNotifier())
    closed = await real.finish(0, "token", "values")
    notifier.notify("t1", broken(closed, how))
    assert seen(await reader.rest()) == [(2, 0, "token"), (3, 0, "values"), (4, 0, "turn.done")]
    assert reads.count > before


async def test_watch_turn_resets_on_a_rewind_and_reads_a_change_made_elsewhere(
    journal: Journal, monkeypatch: pytest.MonkeyPatch
) -> None:
    notifier, writer = await started(journal)
    reads = Reads(journal)
    reader = Reader(watch(journal, notifier))
    await writer.append(0, "token", "step")
    await writer.checkpoint("cp-1", 0)  # boundary 2
    await writer.append(0, "token")
    assert seen(await reader.take(3)) == [(1, 0, "token"), (2, 0, "step"), (3, 0, "token")]
    await writer.redrive()  # seq 3 taken back: a Reset, then the kept events again
    got = await reader.take(3)
    assert isinstance(got[0], Reset) and got[0].attempt == 1
    assert seen(got) == [(2, -1, "RESET"), (1, 0, "token"), (2, 0, "step")]
    # A commit through another replica: its notification says only "changed".
    before = reads.count
    await writer.append(1, "token", tell=False)
    notifier.changed("t1")
    assert seen(await reader.take(1)) == [(3, 1, "token")]
    assert reads.count > before
    await writer.finish(1, tell=True)
    assert seen(await reader.rest()) == [(4, 1, "turn.done")]


async def test_the_engine_tells_a_finish_and_a_park_what_they_committed(
    journal: Journal,
) -> None:
    notifier = TurnNotifier()
    subscription = notifier.subscribe("t1")

    async def dispatch(*_: object, **__: object) -> bool:
        return False

    stub: Any = types.SimpleNamespace(wake=lambda: None, dispatch=dispatch)
    turns = Turns(journal.db, POLICY, notifier, stub, Metrics(), stub, stub)
    await journal.start("t1", "th1")
    parked = await turns.park(
        turn_id="t1", attempt=0, interrupt_json="{}", events=[(1, "values", "{}")]
    )
    news, lost = subscription.take()
    assert not lost and len(news) == 1 and isinstance(news[0], Closed)
    assert news[0].turn.state == "PARKED" and news[0].turn.last_seq == parked.last_seq == 1
    assert [(e.seq, e.type) for e in news[0].events] == [(1, "values")]
    await turns.resume(turn_id="t1", resume_json="{}")
    assert subscription.take() == ([], True)  # a resume: read the journal
    await turns.finish(
        turn_id="t1",
        attempt=0,
        failed=False,
        error="",
        # Seq 1 again (an idempotent resend, not stored again), then a new one.
        events=[(1, "values", "{}"), (2, "token", "{}")],
    )
    news, lost = subscription.take()
    assert not lost and len(news) == 1 and isinstance(news[0], Closed)
    assert news[0].turn.state == "DONE" and news[0].turn.last_seq == 3
    assert [(e.seq, e.type) for e in news[0].events] == [(2, "token"), (3, "turn.done")]
    # Exactly as the journal holds them (what a read would have given).
    stored = transitions.load_events(journal.db.read_conn(), "t1", 1, 10)
    assert list(news[0].events) == stored


async def test_a_watch_past_a_rewound_end_resets_before_the_rerun_news(
    journal: Journal,
) -> None:
    # Decision 630 (the PostgreSQL fault campaign's late joiner): WatchTurn joined at
    # seq 4, which a re-drive had already taken back (to seq 2). Its first read found
    # nothing after seq 4, and the re-run's seqs 3 and 4, taken from the news, went
    # out as if they came after the 4 the watcher held: a repeat with no reset.
    notifier, writer = await started(journal)
    await writer.append(0, "step", "token")
    await writer.checkpoint("cp-1", 0)  # boundary 2
    await writer.append(0, "token", "token")  # seqs 3 and 4, taken back below
    await writer.redrive()
    read = asyncio.Event()
    db: Any = journal.db
    original = db.read

    async def told(fn: Callable[[Any], Any]) -> Any:
        try:
            return await original(fn)
        finally:
            read.set()

    db.read = told
    reader = Reader(watch(journal, notifier, after_seq=4))
    await read.wait()  # its first read is done: what follows comes as news
    await writer.append(1, "token", "token", "token")
    await writer.finish(1, tell=True)
    assert seen(await reader.rest()) == [
        (2, -1, "RESET"),
        (1, 0, "step"),
        (2, 0, "token"),
        (3, 1, "token"),
        (4, 1, "token"),
        (5, 1, "token"),
        (6, 1, "turn.done"),
    ]


async def test_a_rewind_that_told_no_one_resets_a_watch_at_the_rerun_news(
    journal: Journal,
) -> None:
    # A re-drive through another replica while this one's LISTEN was down: no wake
    # here. The re-run's first append through this replica tells of another epoch,
    # so the watch reads the journal and resets before showing it.
    notifier, writer = await started(journal)
    await writer.append(0, "step", "token", "token", "token")
    reader = Reader(watch(journal, notifier))
    assert len(await reader.take(4)) == 4
    await journal.redrive("t1")  # rewound to 0, nobody told
    await writer.append(1, "token")
    await writer.finish(1, tell=True)
    assert seen(await reader.rest()) == [(0, -1, "RESET"), (1, 1, "token"), (2, 1, "turn.done")]


@pytest.mark.parametrize(
    "rewind",
    ["in-the-gap-rerun-after-it", "in-the-gap-rerun-in-it", "after-the-first-page"],
)
@pytest.mark.parametrize("way", ["live", "watch"])
async def test_a_resume_rewound_after_its_position_check_is_told_first(
    journal: Journal, monkeypatch: pytest.MonkeyPatch, rewind: str, way: str
) -> None:
    # Decision 650. A resume (its client's last event: seq 4 of attempt 0) checks that
    # its position still stands, then reads its first page: the LangGraph stream's
    # (`follow_live`) and the SSE's (`follow` with the attempt). A re-drive (another
    # replica's, or the reaper's) in the gap between the two took seqs 3 and 4 back;
    # the re-run wrote them again after the first read (its news, kept from the
    # turn's last seq 2 on: seqs 3 and 4 again, with no Rewound) or in the gap too
    # (the page after seq 4: the client kept the taken-back 3 and 4). Or the re-drive
    # came after the first page, the stream having sent nothing since the resume:
    # `follow_live` knew of no event it released that a rewind could take.
    paged = watch_first_read(monkeypatch)
    notifier, writer = await started(journal)
    await writer.append(0, "step", "token")
    await writer.checkpoint("cp-1", 0)  # boundary 2
    await writer.append(0, "token", "token")  # seqs 3 and 4: the client has them
    db: Any = journal.db
    original = db.read
    reads = 0
    gap = asyncio.Event()

    async def gapped(fn: Callable[[Any], Any]) -> Any:
        nonlocal reads
        reads += 1
        result = await original(fn)
        if reads == 1:  # the position check: the rewind lands right after it
            if rewind.startswith("in-the-gap"):
                await writer.redrive()
            if rewind == "in-the-gap-rerun-in-it":
                await writer.append(1, "token", "token", "token")
            gap.set()
        return result

    db.read = gapped
    follower = live if way == "live" else watch
    reader = Reader(follower(journal, notifier, after_seq=4, after_attempt=0))
    await gap.wait()
    if rewind != "in-the-gap-rerun-in-it":
        await paged.wait()  # it found nothing after seq 4: what follows comes as news
        if rewind == "after-the-first-page":
            await writer.redrive()
        await writer.append(1, "token", "token", "token")
    await writer.finish(1, tell=True)
    got = await reader.rest()
    rerun_events = [(3, 1, "token"), (4, 1, "token"), (5, 1, "token"), (6, 1, "turn.done")]
    if way == "live":
        # Where the turn stands now; the client's state is the one at seq 2.
        assert seen(got) == [(2, -1, "REWOUND"), *rerun_events]
        assert isinstance(got[0], Rewound) and got[0].taken == ()
    else:
        # WatchTurn's reset, and the turn's events from seq 1.
        assert seen(got) == [(2, -1, "RESET"), (1, 0, "step"), (2, 0, "token"), *rerun_events]
        assert isinstance(got[0], Reset) and got[0].attempt == 1
