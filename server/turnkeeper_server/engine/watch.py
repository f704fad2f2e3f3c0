"""WatchTurn: a turn's retained events, then live ones, and a reset on each rewind.

`TurnNotifier` wakes the streams: every follower (`follow`, gRPC's WatchTurn,
docs/architecture.md §3, decision 3; the LangGraph API's `follow_settled` and
`follow_live`) subscribes once for its whole life, *before* its first read; a
commit touching the turn (here, or on another replica through the store's
notification) wakes every subscriber of that turn, so a commit can never slip
between a read and the wait unnoticed. The wake tells what the commit wrote when
the writer knows (`News`): a follower serves such a wake from what it keeps, and
reads the journal for anything else (`_Tail`, decisions 440 and 540).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections import defaultdict
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Final

from turnkeeper_server.journal import transitions
from turnkeeper_server.journal.transitions import Closed, Written
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.records import (
    ENDED,
    PARKED,
    RUNNING,
    TERMINAL_EVENTS,
    EventRecord,
    TurnRecord,
)
from turnkeeper_server.store.contract import Conn, Store

# A page of events read at a time: at most WATCH_BATCH events and, past the first,
# at most WATCH_PAGE_BYTES of event data (decision 184), read WATCH_CHUNK rows at a
# time so a page of large events never holds more than a chunk beyond the budget.
# The next page is read only when the stream's consumer has taken the last event.
WATCH_BATCH = 500
WATCH_PAGE_BYTES = 1 << 20
WATCH_CHUNK = 16


@dataclass(frozen=True, slots=True)
class Settled:
    """News of a commit that wrote a root checkpoint of the turn: its boundary."""

    seq: int


@dataclass(frozen=True, slots=True)
class Owned:
    """News of a commit that changed only who runs the turn (a claim): nothing a
    follower keeps."""


OWNED: Final = Owned()

# What a commit tells a turn's followers: the events an append stored (the writer
# knows them), a finish's or a park's events and the turn as it left it, a root
# checkpoint's boundary, a claim, or None: something else changed (read the
# journal).
News = Written | Closed | Settled | Owned | None
Told = Written | Closed | Settled | Owned

# News held for one follower at most: past it, the follower reads the journal.
NEWS_HELD = 256


class Subscription:
    """A follower's wake and the news of the commits since it last looked: kept for
    the follower's whole life, so a commit made while it was busy is not missed."""

    __slots__ = ("event", "lost", "news")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.news: list[Told] = []
        # Something changed that the news does not say: read the journal.
        self.lost = False

    def add(self, news: News) -> None:
        if news is None or len(self.news) >= NEWS_HELD:
            self.lost = True
            self.news.clear()
        elif not self.lost:
            self.news.append(news)
        self.event.set()

    def take(self) -> tuple[list[Told], bool]:
        """The news so far and whether some was lost; forgets them."""
        news, lost = self.news, self.lost
        self.news, self.lost = [], False
        self.event.clear()
        return news, lost


class TurnNotifier:
    def __init__(self) -> None:
        self._subscribers: defaultdict[str, set[Subscription]] = defaultdict(set)

    def subscribe(self, turn_id: str) -> Subscription:
        subscription = Subscription()
        self._subscribers[turn_id].add(subscription)
        return subscription

    def unsubscribe(self, turn_id: str, subscription: Subscription) -> None:
        subscribers = self._subscribers.get(turn_id)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscribers[turn_id]

    def notify(self, turn_id: str, news: News = None) -> None:
        """A commit touched the turn; `news` says what it did when the committer
        knows (else the followers read the journal)."""
        for subscription in self._subscribers.get(turn_id, ()):
            subscription.add(news)

    def follows(self, turn_id: str) -> bool:
        """Whether a follower would take news of the turn (making it costs)."""
        return turn_id in self._subscribers

    def changed(self, turn_id: str | None) -> None:
        """A change made through another replica; None: any turn may have changed
        (notifications were missed while reconnecting), so every stream re-reads."""
        if turn_id is not None:
            self.notify(turn_id)
            return
        for subscribers in self._subscribers.values():
            for subscription in subscribers:
                subscription.add(None)

    def watchers(self) -> int:
        return sum(len(s) for s in self._subscribers.values())


@dataclass(frozen=True)
class Reset:
    """The turn was rewound: drop what was shown; its retained events follow from
    seq 1. `seq`, `attempt` and `checkpoint_id` say where it went back to."""

    seq: int
    attempt: int
    checkpoint_id: str


async def follow(
    db: Store,
    notifier: TurnNotifier,
    metrics: Metrics,
    turn_id: str,
    after_seq: int,
    *,
    after_attempt: int | None = None,
) -> AsyncGenerator[EventRecord | Reset]:
    """Retained events after `after_seq`, then live ones; a Reset and a replay from
    seq 1 whenever the turn is rewound; ends after the terminal event, or at once
    when the turn is over and `after_seq` is already past it. Served from the
    commits' news like the LangGraph API's followers (`_Tail`); with no settled
    limit to keep, it waits for a wake as long as it takes (a change through another
    replica wakes it through the store's notification).

    `after_attempt`: the attempt of the event at `after_seq` its client has (the
    SSE's resume, web/sse.py), None when unknown (WatchTurn's request): then a
    position no longer the journal's is a Reset before anything else, and any
    rewind after that check is one too (decision 650)."""
    cursor = after_seq
    metrics.watchers.inc()
    tail = _Tail(db, notifier, turn_id, bounded=False)
    try:
        # The turn's rewinds as of the position's check, else of the first page.
        epoch: int | None = None
        if after_seq > 0 and after_attempt is not None:
            kept, epoch = await db.read(
                functools.partial(_kept, turn_id=turn_id, seq=after_seq, attempt=after_attempt)
            )
            if kept < after_seq:
                epoch = None  # what follows is the Reset's replay
                cursor = 0
                checkpoint_id, boundary = transitions.latest_boundary(db.read_conn(), turn_id)
                turn = transitions.require_turn(db.read_conn(), turn_id)
                yield Reset(seq=boundary, attempt=turn.attempts, checkpoint_id=checkpoint_id)
        fresh = True
        while True:
            turn, events, more, _ = await tail.page(cursor, fresh=fresh)
            fresh = False
            rewound = taken_back(turn, events, cursor, epoch)
            epoch = turn.rewinds
            if rewound:
                cursor = 0
                checkpoint_id, boundary = transitions.latest_boundary(db.read_conn(), turn_id)
                yield Reset(seq=boundary, attempt=turn.attempts, checkpoint_id=checkpoint_id)
                continue
            for event in events:
                yield event
                cursor = event.seq
                if event.type in TERMINAL_EVENTS:
                    return
            if more:
                continue
            if turn.state in ENDED:
                # Over, and its terminal event is at or before the cursor:
                # nothing more will ever come (a watcher joined too late).
                return
            await tail.wake()
    finally:
        tail.close()
        metrics.watchers.dec()


def taken_back(turn: TurnRecord, events: list[EventRecord], cursor: int, epoch: int | None) -> bool:
    """Whether a rewind may have taken back events a stream's client holds: the
    one rule of both followers that reset (`follow`'s Reset, `follow_live`'s
    Rewound). `epoch`: the turn's rewinds when the stream last knew its position
    stood (its last page, or a resume's check of its position, decision 650); None
    when it never did (a WatchTurn before its first page).

    A rewind since then, or one the stream never saw (decision 630): its position
    is past the turn's last event (a rewind made before its first read, as when it
    joins at a seq a TurnStatus said before the rewind), or the page has an event
    at or before its position (the re-run wrote that seq again, and the news of it
    came to a view read after the rewind). Events only grow but for a rewind, so
    neither happens otherwise; a turn never rewound took nothing back (a position
    past its end asks for later events only). A turn that is over and ends before
    the position is a stream that joined too late: it ends (`follow`)."""
    if epoch is not None and turn.rewinds != epoch:
        return True
    if events and events[0].seq <= cursor:
        return True
    return cursor > turn.last_seq and turn.rewinds > 0 and turn.state not in ENDED


# How long a follower of settled events waits for a wake before it looks again: a
# checkpoint committed through another replica (PostgreSQL) notifies no one here.
SETTLED_RECHECK_SECONDS = 1.0


async def follow_settled(
    db: Store, notifier: TurnNotifier, metrics: Metrics, turn_id: str, after_seq: int
) -> AsyncGenerator[EventRecord]:
    """The turn's events after `after_seq` that no rewind can take back: those at or
    before the boundary of its newest checkpoint (a re-drive rewinds to exactly
    that boundary, and boundaries only grow), and every event once the turn is
    parked or over. So a reader never sees an event twice and never needs a reset;
    what it gives up is seeing a step's events before the step's checkpoint.
    Ends after the terminal event, or once a parked turn's events are all out
    (a LangGraph run ends at its interrupt)."""
    cursor = after_seq
    metrics.watchers.inc()
    tail = _Tail(db, notifier, turn_id)
    try:
        fresh = True
        while True:
            turn, events, more, limit = await tail.page(cursor, fresh=fresh)
            fresh = False
            held = False
            for event in events:
                if event.seq > limit:
                    held = True
                    break
                yield event
                cursor = event.seq
                if event.type in TERMINAL_EVENTS:
                    return
            if more and not held:
                continue
            if (turn.state in ENDED or turn.state == PARKED) and cursor >= turn.last_seq:
                return
            fresh = not await tail.woken()
    finally:
        tail.close()
        metrics.watchers.dec()


@dataclass(frozen=True)
class Rewound:
    """What `follow_live` released past the settled boundary was taken back by a
    re-drive: the turn's events now stand as they were at `seq` (every released
    event after it is gone, and the re-run's follow). `taken`: those events, as
    they were released; empty when a resume's own position was taken back (its
    events were released to another stream, and the journal no longer has them)."""

    seq: int
    taken: tuple[EventRecord, ...]


async def follow_live(
    db: Store,
    notifier: TurnNotifier,
    metrics: Metrics,
    turn_id: str,
    after_seq: int,
    *,
    after_attempt: int | None = None,
    waits: Callable[[str], bool],
) -> AsyncGenerator[EventRecord | Rewound]:
    """`follow_settled`, but events go out as soon as they are journaled, ahead of
    their step's checkpoint, but for those of a type `waits` says must wait (what a
    reader could not take back: a step's update, a state). Events are still
    released in seq order: an unsettled held event holds back those after it until
    it settles, so only events of other types (a model's tokens) can ever be taken
    back. When a re-drive takes released ones back, a `Rewound` says where the turn
    now stands, and the re-run's events follow from there.

    `after_attempt`: the attempt of the event at `after_seq` the reader had (a
    resume); None when unknown (a settled stream's position, which no rewind takes
    back). If that event is no longer the journal's, the reader's position was
    taken back: a `Rewound` with no `taken` comes first."""
    cursor = after_seq
    # Released past the settled limit, so a rewind may take them back.
    released: list[EventRecord] = []
    # The resume's position (seq, attempt) while the stream has sent nothing after
    # it: its events went out on another stream, so a rewind may take it back too.
    resumed: tuple[int, int] | None = None
    metrics.watchers.inc()
    tail = _Tail(db, notifier, turn_id)
    try:
        # The turn's rewinds when the stream last knew its position stood: as of a
        # resume's check of it (the same read, decision 650), else of the first page
        # (a read of its own cost a snapshot per stream): a rewind before that took
        # back nothing this stream or its client holds.
        epoch: int | None = None
        if after_seq > 0 and after_attempt is not None:
            kept, epoch = await db.read(
                functools.partial(_kept, turn_id=turn_id, seq=after_seq, attempt=after_attempt)
            )
            if kept < after_seq:
                cursor = kept
                yield Rewound(seq=kept, taken=())
            else:
                resumed = (after_seq, after_attempt)
        fresh = True
        while True:
            turn, events, more, limit = await tail.page(cursor, fresh=fresh)
            fresh = False
            if taken_back(turn, events, cursor, epoch):
                epoch = turn.rewinds
                # The newest event the client holds that a rewind could take back.
                holds = (released[-1].seq, released[-1].attempt) if released else resumed
                if holds is None:
                    # None such (a settled position, settled events): what stands is
                    # at most the settled limit, where a re-drive rewinds to.
                    kept = min(cursor, limit)
                else:
                    kept, _ = await db.read(
                        functools.partial(_kept, turn_id=turn_id, seq=holds[0], attempt=holds[1])
                    )
                # The page may hold what the rewind took (decision 630): read again.
                fresh = True
                if kept < cursor:
                    resumed = None
                    taken = tuple(e for e in released if e.seq > kept)
                    released = [e for e in released if e.seq <= kept]
                    cursor = kept
                    yield Rewound(seq=kept, taken=taken)
                continue
            epoch = turn.rewinds
            released = [e for e in released if e.seq > limit]
            held = False
            for event in events:
                if event.seq > limit:
                    if waits(event.type):
                        held = True
                        break
                    released.append(event)
                yield event
                cursor = event.seq
                resumed = None
                if event.type in TERMINAL_EVENTS:
                    return
            if more and not held:
                continue
            if (turn.state in ENDED or turn.state == PARKED) and cursor >= turn.last_seq:
                return
            fresh = not await tail.woken()
    finally:
        tail.close()
        metrics.watchers.dec()


class _Tail:
    """A follower's view of its turn: the turn, its settled limit and the events
    after the follower's position, read from the journal and then kept up to date
    from the news of this process's commits (`Subscription`): an append's events,
    a finish's or a park's events and the turn's new state, and a root checkpoint's
    boundary, which the writer knows, so a wake costs no read. The journal stays
    the truth: any other change (a re-drive's rewind, a cancel, a resume), news
    that does not fit (a gap, another epoch, events the news did not carry), a
    position behind what is kept (a resume, a rewind) and every wait that ended
    without a wake read it again.

    `bounded`: keep the settled limit (the newest root checkpoint's boundary, read
    with each page); WatchTurn's `follow` has none."""

    def __init__(
        self, db: Store, notifier: TurnNotifier, turn_id: str, *, bounded: bool = True
    ) -> None:
        self.db = db
        self.notifier = notifier
        self.turn_id = turn_id
        self.bounded = bounded
        # Subscribed before the first read: no commit slips between it and a wait.
        self.subscription = notifier.subscribe(turn_id)
        self.turn: TurnRecord | None = None
        self.limit = 0
        # Every event after `since` through turn.last_seq when `whole`.
        self.since = 0
        self.events: list[EventRecord] = []
        self.whole = False

    def close(self) -> None:
        self.notifier.unsubscribe(self.turn_id, self.subscription)

    async def wake(self) -> None:
        """Wait for a commit touching the turn, however long it takes."""
        await self.subscription.event.wait()

    async def woken(self) -> bool:
        """Wait for a commit touching the turn; False when none came in time (a
        change through another replica may notify no one here)."""
        event = self.subscription.event
        if event.is_set():
            return True
        try:
            # asyncio.timeout, not wait_for: no task per wait.
            async with asyncio.timeout(SETTLED_RECHECK_SECONDS):
                await event.wait()
        except TimeoutError:
            return False
        return True

    async def page(
        self, cursor: int, *, fresh: bool
    ) -> tuple[TurnRecord, list[EventRecord], bool, int]:
        """`_live_page` after `cursor`, from memory when it holds it (`fresh`: read
        the journal)."""
        news, lost = self.subscription.take()
        if fresh or lost or not self.whole or cursor < self.since or not self._apply(news):
            return await self._read(cursor)
        assert self.turn is not None  # whole after a read
        if cursor > self.since:
            drop = 0
            while drop < len(self.events) and self.events[drop].seq <= cursor:
                drop += 1
            del self.events[:drop]
            self.since = cursor
        page: list[EventRecord] = []
        size = 0
        for event in self.events:
            if len(page) >= WATCH_BATCH or (page and size + event_bytes(event) > WATCH_PAGE_BYTES):
                break
            page.append(event)
            size += event_bytes(event)
        turn = self.turn
        limit = turn.last_seq if turn.state in ENDED or turn.state == PARKED else self.limit
        return turn, page, len(page) < len(self.events), limit

    async def _read(self, cursor: int) -> tuple[TurnRecord, list[EventRecord], bool, int]:
        if self.bounded:
            turn, events, more, limit = await self.db.read(
                functools.partial(_live_page, turn_id=self.turn_id, after_seq=cursor)
            )
        else:
            turn, events, more = await self.db.read(
                functools.partial(_turn_and_events, turn_id=self.turn_id, after_seq=cursor)
            )
            limit = turn.last_seq
        self.turn, self.limit = turn, limit
        self.since, self.events, self.whole = cursor, list(events), not more
        return turn, events, more, limit

    def _apply(self, news: list[Told]) -> bool:
        """Bring the view up to date with `news`; False when they do not fit it."""
        turn = self.turn
        if turn is None:
            return False
        last, limit = turn.last_seq, self.limit
        added: list[EventRecord] = []
        closed: TurnRecord | None = None
        for item in news:
            if isinstance(item, Owned):
                continue
            if isinstance(item, Settled):
                if item.seq > last:
                    return False  # the checkpoint's commit wrote events too
                limit = max(limit, item.seq)
                continue
            if isinstance(item, Written):
                rewinds, new_last, records = item.rewinds, item.last_seq, item.records()
            else:
                rewinds, new_last, records = item.turn.rewinds, item.turn.last_seq, item.events
            # Only a running turn's commits are news; after a finish or a park here,
            # what changes it again (a resume) comes without.
            if rewinds != turn.rewinds or turn.state != RUNNING or closed is not None:
                return False
            if new_last <= last:
                if isinstance(item, Closed):
                    # Read already (and maybe resumed since: its events are no
                    # proof of the state the view holds), or a park that stored
                    # no event, which nothing tells from such a one: read.
                    return False
                continue  # already read from the journal
            new = [e for e in records if e.seq > last]
            if not new or new[0].seq != last + 1 or new[-1].seq != new_last:
                return False
            added += new
            last = new_last
            if isinstance(item, Closed):
                closed = item.turn
        if added:
            self.events += added
        if closed is not None:
            self.turn = closed
        elif added:
            self.turn = dataclasses.replace(turn, last_seq=last)
        self.limit = limit
        return True


def _live_page(
    conn: Conn, *, turn_id: str, after_seq: int
) -> tuple[TurnRecord, list[EventRecord], bool, int]:
    """A page of events, and the seq no rewind can go below (all of them once the
    turn is parked or over), read together."""
    turn, events, more = _turn_and_events(conn, turn_id=turn_id, after_seq=after_seq)
    if turn.state in ENDED or turn.state == PARKED:
        return turn, events, more, turn.last_seq
    return turn, events, more, transitions.latest_boundary(conn, turn_id)[1]


def _kept(conn: Conn, *, turn_id: str, seq: int, attempt: int) -> tuple[int, int]:
    """How far the events a reader had up to (`seq`, written by `attempt`) still
    stand, and the turn's rewinds as of that answer (read together: a rewind after
    it shows as another count). A rewind deletes a suffix of the events and the
    re-run writes with a later attempt, so what stands is the newest seq at or
    before `seq` written by `attempt` or before."""
    rewinds = transitions.require_turn(conn, turn_id).rewinds
    row = conn.execute(
        "SELECT MAX(seq) FROM main.events WHERE turn_id = ? AND seq <= ? AND attempt <= ?",
        (turn_id, seq, attempt),
    ).fetchone()
    return (int(row[0]) if row and row[0] is not None else 0), rewinds


def event_bytes(event: EventRecord) -> int:
    """What an event weighs in a page: its data and type (characters, close enough
    to bytes for a budget)."""
    return len(event.data_json) + len(event.type) + 64


def _turn_and_events(
    conn: Conn, *, turn_id: str, after_seq: int
) -> tuple[TurnRecord, list[EventRecord], bool]:
    """The turn, a page of its events after `after_seq`, and whether more may follow
    at once (the page stopped at its count or byte budget, not at the last event)."""
    turn = transitions.require_turn(conn, turn_id)
    page: list[EventRecord] = []
    size = 0
    cursor = after_seq
    while len(page) < WATCH_BATCH:
        want = min(WATCH_CHUNK, WATCH_BATCH - len(page))
        chunk = transitions.load_events(conn, turn_id, cursor, want)
        for event in chunk:
            # Always at least one event, however large.
            if page and size + event_bytes(event) > WATCH_PAGE_BYTES:
                return turn, page, True
            page.append(event)
            size += event_bytes(event)
        if len(chunk) < want:
            return turn, page, False
        cursor = chunk[-1].seq
    return turn, page, True
