"""PostgreSQL's outbox drain publishes what its own writer committed from memory
(decision 801, store/postgres_outbox.py): the ids are read back from the rows'
INSERT; the rows go out in id order without a look at the table, and leave it in
a later group of the writer. The table is looked at for what memory cannot
hold: at start (rows written before), after a failed publish (the ids memory
lost, decision 802), after memory overflowed (every row), each until a look
catches up, and for orphans (rows a replica left, older than ORPHAN_AGE)."""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool
from turnkeeper_server.store import postgres_outbox
from turnkeeper_server.store.contract import Tx
from turnkeeper_server.store.outbox_rows import write_messages
from turnkeeper_server.store.postgres import PostgresDatabase
from turnkeeper_server.store.records import OutboxRow

from tests.support.postgres import database_of, replica, writer_statements

pytestmark = [pytest.mark.postgres_only, pytest.mark.timeout(60)]


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresDatabase]:
    with replica(database_url) as db:
        yield db


class Sink:
    """The publisher's side: what each drain handed it, and whether it takes it."""

    def __init__(self) -> None:
        self.batches: list[list[tuple[int, str, bytes]]] = []
        self.ok = True

    async def __call__(self, rows: list[OutboxRow]) -> bool:
        self.batches.append([(row.id, row.subject, row.payload) for row in rows])
        return self.ok

    @property
    def payloads(self) -> list[bytes]:
        return [payload for batch in self.batches for _, _, payload in batch]


# What a look took rows by: the ids memory lost, or the time they were written before.
Look = float | str


@pytest.fixture
def looks(database_url: str, monkeypatch: pytest.MonkeyPatch) -> list[Look]:
    """Each look at this test's outbox table: "ids" for one by the ids memory lost,
    else the time it took rows written before (the first drain's at start, infinity
    after an overflow, ORPHAN_AGE before the look for orphans)."""
    seen: list[Look] = []
    take = postgres_outbox._take
    ours = database_of(database_url)

    def counted(
        pool: ConnectionPool[psycopg.Connection[Any]],
        limit: int,
        by: float | list[int],
        published: list[int],
    ) -> object:
        if isinstance(pool.conninfo, str) and database_of(pool.conninfo) == ours:
            seen.append("ids" if isinstance(by, list) else by)
        return take(pool, limit, by, published)

    monkeypatch.setattr(postgres_outbox, "_take", counted)
    return seen


@pytest.fixture
async def sink(store: PostgresDatabase, looks: list[Look], monkeypatch: pytest.MonkeyPatch) -> Sink:
    """The publisher of `store`, past the start's look at the table (rows written
    before it: none), with no look for orphans unless a test asks (ORPHAN_LOOK)."""
    monkeypatch.setattr(postgres_outbox, "ORPHAN_LOOK", 3600.0)
    taker = Sink()
    started = time.time()
    assert await store.drain_outbox(10, taker) == 0
    assert len(looks) == 1 and isinstance(looks[0], float)
    assert started <= looks[0] <= time.time()
    return taker


def messages(subject: str, *payloads: bytes) -> Any:
    def write(tx: Tx) -> None:
        write_messages(tx, subject, list(payloads), time.time())

    return write


def table(database_url: str) -> list[tuple[int, bytes]]:
    with psycopg.connect(database_url, autocommit=True) as admin:
        rows = admin.execute("SELECT id, payload FROM outbox ORDER BY id").fetchall()
    return [(int(i), bytes(p)) for i, p in rows]


async def test_what_the_writer_committed_goes_from_memory_in_order_and_leaves_the_table(
    store: PostgresDatabase, database_url: str, looks: list[Look], sink: Sink
) -> None:
    await store.write(messages("s.a", b"1", b"2"))
    await store.write(messages("s.b", b"3"))
    assert [payload for _, payload in table(database_url)] == [b"1", b"2", b"3"]

    assert await store.drain_outbox(2, sink) == 2  # a batch's limit holds
    assert await store.drain_outbox(10, sink) == 1
    assert await store.drain_outbox(10, sink) == 0
    assert len(looks) == 1  # the start's only: none for these rows
    ids = [i for batch in sink.batches for i, _, _ in batch]
    assert sink.payloads == [b"1", b"2", b"3"]
    assert ids == sorted(ids) and len(set(ids)) == 3
    assert [s for batch in sink.batches for _, s, _ in batch] == ["s.a", "s.a", "s.b"]

    # The delete rides the writer's next group (store/group_commit.py).
    await store.write(lambda tx: None)
    assert table(database_url) == []
    assert store.outbox_backlog() == 0


async def test_ids_come_back_from_the_identity_in_commit_order_across_replicas(
    store: PostgresDatabase, database_url: str, sink: Sink
) -> None:
    # Each replica publishes its own rows with the ids the identity gave them (read
    # back from their INSERT): ids follow the order the rows committed, whichever
    # replica wrote them (decision 66), and a frame's rows follow its messages.
    mine, theirs = sink, Sink()
    with replica(database_url) as other:
        assert await other.drain_outbox(10, theirs) == 0
        await store.write(messages("s", b"a1", b"a2", b"a3"))
        await other.write(messages("s", b"b1"))
        await store.write(messages("s", b"a4"))
        committed = [payload for _, payload in table(database_url)]
        assert await store.drain_outbox(10, mine) == 4
        assert await other.drain_outbox(10, theirs) == 1
    assert committed == [b"a1", b"a2", b"a3", b"b1", b"a4"]  # by id
    ids = {p: i for batch in mine.batches + theirs.batches for i, _, p in batch}
    assert sorted(ids, key=ids.__getitem__) == committed
    assert mine.payloads == [b"a1", b"a2", b"a3", b"a4"] and theirs.payloads == [b"b1"]


async def test_a_failed_publish_falls_back_to_the_table_until_it_catches_up(
    store: PostgresDatabase, database_url: str, looks: list[Look], sink: Sink
) -> None:
    await store.write(messages("s", b"1", b"2", b"3"))
    sink.ok = False
    assert await store.drain_outbox(10, sink) == 0  # from memory, refused
    sink.ok = True
    await store.write(messages("s", b"4"))
    with replica(database_url) as other:  # another replica's row: not this one's
        await other.write(messages("s", b"theirs"))
    sink.batches.clear()
    looks.clear()

    # The ids memory lost, from the table in id order, a batch at a time until one
    # takes less than it asked; then memory's, committed since.
    assert await store.drain_outbox(2, sink) == 2
    assert await store.drain_outbox(2, sink) == 1
    assert looks == ["ids", "ids"]
    assert await store.drain_outbox(10, sink) == 1  # from memory again
    assert await store.drain_outbox(10, sink) == 0
    assert looks == ["ids", "ids"]
    assert sink.payloads == [b"1", b"2", b"3", b"4"]  # each once
    await store.write(lambda tx: None)  # the delete of 4 rides it
    assert [payload for _, payload in table(database_url)] == [b"theirs"]


async def test_a_look_leaves_the_rows_published_from_memory_whose_delete_is_pending(
    store: PostgresDatabase, database_url: str, looks: list[Look], sink: Sink
) -> None:
    # PostgreSQL away, or the writer busy: rows published from memory wait for their
    # delete while a publish fails and sends the drain to the table. Its look takes
    # what was not published, not the published rows again (the full PostgreSQL
    # campaign's NATS duplicates rose from 88 to 2,204 with decision 801 before).
    await store.write(messages("s", b"1", b"2", b"3"))
    entered, release = threading.Event(), threading.Event()

    def busy(tx: Tx) -> None:
        entered.set()
        release.wait(30)

    writing = asyncio.ensure_future(store.write(busy))
    try:
        await asyncio.to_thread(entered.wait, 30)
        assert await store.drain_outbox(2, sink) == 2  # 1 and 2; their delete waits
        sink.ok = False
        assert await store.drain_outbox(10, sink) == 0  # 3 refused: to the table
        sink.ok = True
        sink.batches.clear()
        looks.clear()
        assert await store.drain_outbox(10, sink) == 1
        assert sink.payloads == [b"3"] and looks == ["ids"]
    finally:
        release.set()
        await writing
    await store.write(lambda tx: None)  # the delete of 1 and 2 rides it, or did
    assert table(database_url) == []


async def test_an_orphan_is_taken_from_the_table_once_it_is_old_enough(
    store: PostgresDatabase,
    database_url: str,
    looks: list[Look],
    sink: Sink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(postgres_outbox, "ORPHAN_LOOK", 0.0)
    now = time.time()
    with psycopg.connect(database_url, autocommit=True) as admin:  # a replica that died
        admin.execute(
            "INSERT INTO outbox (subject, payload, created_at) VALUES "
            "('s', 'old', %s), ('s', 'young', %s)",
            (now - postgres_outbox.ORPHAN_AGE - 1, now),
        )
    await store.write(messages("s", b"mine"))
    assert await store.drain_outbox(10, sink) == 2
    assert sink.payloads == [b"old", b"mine"]
    older = looks[-1]
    assert isinstance(older, float) and now - postgres_outbox.ORPHAN_AGE - 1 < older < now
    await store.write(lambda tx: None)  # the delete of "mine" rides it
    assert [payload for _, payload in table(database_url)] == [b"young"]


async def test_a_group_that_deletes_outbox_rows_sends_the_drain_back_to_the_table(
    store: PostgresDatabase, looks: list[Look], sink: Sink
) -> None:
    # Erasure and retention delete outbox rows by subject: what memory holds may
    # be gone, and what is gone is never published.
    await store.write(messages("s.erased", b"gone"))
    await store.write(messages("s.kept", b"kept"))
    await store.write(
        lambda tx: tx.execute("DELETE FROM main.outbox WHERE subject = ?", ("s.erased",))
    )
    await store.write(messages("s.kept", b"after"))
    looks.clear()
    assert await store.drain_outbox(10, sink) == 1  # the ids memory held: one is left
    assert await store.drain_outbox(10, sink) == 1  # memory's, committed since
    assert await store.drain_outbox(10, sink) == 0
    assert sink.payloads == [b"kept", b"after"]
    assert looks == ["ids"]


async def test_memory_past_its_bound_is_dropped_for_the_table(
    store: PostgresDatabase,
    looks: list[Look],
    sink: Sink,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # NATS away for long: memory holds at most MEMORY_MAX messages; the table has
    # them all, and hands them out in order.
    monkeypatch.setattr(postgres_outbox, "MEMORY_MAX", 2)
    await store.write(messages("s", b"1", b"2"))
    await store.write(messages("s", b"3"))
    looks.clear()
    assert await store.drain_outbox(10, sink) == 3
    assert looks == [math.inf]  # every row: memory's ids would grow without bound
    await store.write(messages("s", b"4"))
    assert await store.drain_outbox(10, sink) == 1  # from memory again
    assert looks == [math.inf]
    assert sink.payloads == [b"1", b"2", b"3", b"4"]


@pytest.mark.parametrize("rows", [1, 3, 4])
async def test_ids_come_back_from_the_statement_their_insert_rode_in(
    store: PostgresDatabase,
    database_url: str,
    sink: Sink,
    monkeypatch: pytest.MonkeyPatch,
    rows: int,
) -> None:
    # An append's check, its rows and the group's notification go as one statement
    # (decisions 610, 780): the outbox INSERT's ids are a column of its query. Rows
    # of one chunk are a VALUES, three an unnest of arrays.
    payloads = [str(n).encode() for n in range(rows)]

    def append(tx: Tx) -> None:
        tx.announce(["t-ids"])
        tx.send("SELECT count(*) FROM main.turns WHERE turn_id = ?", ("t-ids",))
        write_messages(tx, "s", payloads, time.time())

    sent = writer_statements(monkeypatch, database_url)
    await store.write(append)
    committed = table(database_url)
    fused = [s for s in sent if "RETURNING id" in s]
    assert len(fused) == 1 and "array_agg(id)" in fused[0] and "pg_notify" in fused[0]
    assert await store.drain_outbox(10, sink) == rows
    assert [(i, p) for batch in sink.batches for i, _, p in batch] == committed
    assert [p for _, p in committed] == payloads
