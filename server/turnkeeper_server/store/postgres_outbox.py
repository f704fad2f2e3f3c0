"""PostgreSQL's outbox drain (decision 801).

A replica's writer reads its outbox rows' ids back from their INSERT (RETURNING,
riding in the operation's one statement: store/postgres_riders.py) and, once their
group has committed, hands the rows to this replica's drain
(`OutboxDrain.committed`), which publishes them from memory, in id order, and
deletes them by id in a later group of its writer (riding it, as SQLite's
publisher's delete does): no read of the table, no transaction of its own. What a
replica committed and did not publish, because it died or its publish failed, is
taken from the table by a look: rows taken and deleted in a transaction held while
they are published, their locks skipped by other replicas' looks.

- A drain *from the table* looks for what memory does not hold, until a look takes
  fewer rows than it asked: at start, the rows written before the first drain (what
  a process before left); after a publish from memory failed, or a group deleted
  outbox rows or its COMMIT's outcome is unknown, the ids memory lost, leaving other
  replicas' rows to them (decision 802); after memory overflowed, every row.
- Otherwise the table is looked at only for *orphans*, at most every ORPHAN_LOOK:
  rows older than ORPHAN_AGE, which their replica would have published and deleted
  long before (a replica that died, a delete that failed, a COMMIT in doubt).

A row can go out twice (another replica's look taking rows published from memory
whose delete had not committed, or fresh rows at its start); JetStream drops the
copy by its Nats-Msg-Id, as after a crash between publish and delete.
The first copy of each id goes out in id order from the replica that wrote it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from turnkeeper_server.store import stats
from turnkeeper_server.store.contract import Conn, Publish, Tx
from turnkeeper_server.store.postgres_conn import unavailable
from turnkeeper_server.store.records import OutboxRow

# How often a replica publishing from memory looks at the table for orphans, and how
# old a row must be to be one (its writer's clock, `created_at`).
ORPHAN_LOOK = 1.0
ORPHAN_AGE = 10.0
# Messages, and their payloads' bytes, held for publishing at most (NATS away):
# past either, memory is dropped and the drain falls back to the table, which
# holds them all.
MEMORY_MAX = 10_000
MEMORY_MAX_BYTES = 64 << 20

PUBLISHED_DELETE = "DELETE FROM main.outbox WHERE id = ANY(?::bigint[])"
# How any other delete of outbox rows begins (erasure's, retention's): a group with
# one sends the drain back to the table (`forget`).
OUTBOX_DELETES = "DELETE FROM main.outbox "
BACKLOG = "SELECT count(*) FROM main.outbox WHERE id <> ALL(?::bigint[])"

# Rides a group of the writer (store/group_commit.py): returns its future.
Ride = Callable[[str, Callable[[Tx], bool]], "asyncio.Future[bool]"]


class OutboxDrain:
    """A replica's drains of the outbox: from memory what its writer committed
    (`committed`), from the table what memory does not hold."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        # Rows committed and not yet published, in id order, and their payloads' bytes.
        self._memory: list[OutboxRow] = []
        self._bytes = 0
        # Memory is kept from the first drain on: a replica that never drains (no
        # NATS configured, or not reached yet) holds nothing.
        self._draining = False
        # Moves whenever memory is dropped: a publish or look that began before it
        # leaves memory alone.
        self._epoch = 0
        # What the table is looked at for, until a look catches up: rows written
        # before a time, any replica's (`_before`: at start, the first drain's time;
        # after memory overflowed, infinity), or the ids memory lost (`_lost`: after a
        # failed publish, or a group that deleted outbox rows or whose COMMIT's
        # outcome is unknown), which leaves other replicas' rows to them.
        self._before: float | None = None
        self._lost: list[int] = []
        self._orphans_looked = 0.0
        # Ids published from memory whose delete has not committed.
        self._deletes: list[int] = []

    def committed(self, rows: list[OutboxRow]) -> None:
        """A group with these outbox rows committed: on the writer thread, before its
        callers (and the publisher's wake) hear of it."""
        with self._lock:
            if not self._draining:
                return
            self._memory += rows
            self._bytes += sum(len(row.payload) for row in rows)
            if len(self._memory) > MEMORY_MAX or self._bytes > MEMORY_MAX_BYTES:
                self._drop(whole=True)

    def forget(self) -> None:
        """What memory holds may not be what committed (a group deleted outbox rows,
        or its COMMIT's outcome is unknown): the table's again. Writer thread."""
        with self._lock:
            self._drop()

    def _forget_first(self, n: int) -> None:
        """The first `n` rows of memory published, or found in the table. Locked."""
        self._bytes -= sum(len(row.payload) for row in self._memory[:n])
        del self._memory[:n]

    def _forget_ids(self, ids: set[int]) -> None:
        """Memory's rows with these ids taken from the table by a look. Locked."""
        if not ids:
            return
        kept = [row for row in self._memory if row.id not in ids]
        self._bytes = sum(len(row.payload) for row in kept)
        self._memory = kept

    def _drop(self, *, whole: bool = False) -> None:
        """Memory forgotten (the table holds what it held): the table's for its ids,
        or, `whole`, for every row (memory overflowed: its ids would grow without
        bound while NATS is away). Locked."""
        if whole:
            self._before = math.inf
            self._lost = []
        elif self._before != math.inf:
            self._lost += [row.id for row in self._memory]
        self._memory = []
        self._bytes = 0
        self._epoch += 1

    @property
    def _from_table(self) -> bool:
        return not self._draining or self._before is not None or bool(self._lost)

    async def drain(
        self,
        pool: ConnectionPool[psycopg.Connection[Any]],
        executor: ThreadPoolExecutor,
        limit: int,
        publish: Publish,
        ride: Ride,
    ) -> int:
        """Publish a batch; how many messages left the outbox."""
        if self._from_table:
            return await self._catch_up(pool, executor, limit, publish)
        orphans = 0
        now = time.monotonic()
        if now - self._orphans_looked >= ORPHAN_LOOK:
            self._orphans_looked = now
            older = time.time() - ORPHAN_AGE
            taken = await _look(pool, executor, limit, publish, self.url, older, self._deletes)
            if taken:
                orphans, took = taken
                with self._lock:  # a row still in memory, if its publish is that late
                    self._forget_ids(set(took))
        with self._lock:
            epoch = self._epoch
            rows = self._memory[:limit]
        if not rows:
            return orphans
        if not await publish(rows):
            with self._lock:
                if self._epoch == epoch:
                    self._drop()
            return orphans
        with self._lock:
            if self._epoch == epoch:
                self._forget_first(len(rows))
        self._delete([row.id for row in rows], ride)
        return orphans + len(rows)

    async def _catch_up(
        self,
        pool: ConnectionPool[psycopg.Connection[Any]],
        executor: ThreadPoolExecutor,
        limit: int,
        publish: Publish,
    ) -> int:
        """A look at the table for what memory does not hold, until one takes less
        than it asked: the first drain's rows written before it (what a process
        before left), after an overflow every row, else the ids memory lost."""
        with self._lock:
            if not self._draining:  # the first drain
                self._draining = True
                self._before = time.time()
            epoch, before, lost = self._epoch, self._before, list(self._lost)
        by = lost if before is None else before
        taken = await _look(pool, executor, limit, publish, self.url, by, self._deletes)
        if taken is None:
            return 0
        count, took = taken
        caught_up = len(took) < limit
        with self._lock:
            if self._epoch != epoch:
                return count  # memory dropped meanwhile: what to look for is new
            if before is not None:
                # A row committed while the look began may be in memory too.
                self._forget_ids(set(took))
                if caught_up:
                    self._before = None
            else:
                gone = set(took) | (set(lost) if caught_up else set())
                self._lost = [i for i in self._lost if i not in gone]
            if not self._from_table:
                self._orphans_looked = time.monotonic()  # this look took them
        return count

    def backlog(self, conn: Conn) -> int:
        """Messages not yet published: the table's rows, but for those published
        from memory whose delete has not committed."""
        if not self._deletes:
            return stats.outbox_backlog(conn)
        row = conn.execute(BACKLOG, (list(self._deletes),)).fetchone()
        return int(row[0])

    def _delete(self, ids: list[int], ride: Ride) -> None:
        """Delete the published rows in the writer's next group. A rider replaces the
        one not yet taken, so each carries every id not yet deleted; a delete that
        failed leaves its ids for the next."""
        self._deletes += ids
        pending = list(self._deletes)

        def delete(tx: Tx) -> bool:
            tx.execute(PUBLISHED_DELETE, (pending,))
            return True

        def done(future: asyncio.Future[bool]) -> None:
            # Failed, or replaced by a later rider (it resolves to None), which
            # carries these ids too: they stay for it, or for the next.
            if future.cancelled() or future.exception() is not None or not future.result():
                return
            gone = set(pending)
            self._deletes = [i for i in self._deletes if i not in gone]

        # Closing: the next process's look publishes them again, dropped by id.
        with contextlib.suppress(RuntimeError):
            ride("outbox-delete", delete).add_done_callback(done)


async def _look(
    pool: ConnectionPool[psycopg.Connection[Any]],
    executor: ThreadPoolExecutor,
    limit: int,
    publish: Publish,
    url: str,
    by: float | list[int],
    published: list[int],
) -> tuple[int, list[int]] | None:
    """Take rows from the table `by` a time (written before it, by their writer's
    clock) or by their ids, but for the ids this replica `published` from memory
    whose delete has not committed, deleted in a transaction held while they are
    published, with FOR UPDATE SKIP LOCKED: another replica's look skips them, and
    takes them over if this one dies or fails to publish (the transaction rolls
    back, the rows come back). One statement takes and deletes them, after its
    BEGIN; the COMMIT is asynchronous (decision 430): the delete of rows already
    published needs no WAL flush, a crash that loses it publishes them again, which
    JetStream drops by Nats-Msg-Id, as after a crash before the delete. How many
    messages it took and the rows' ids, or None when their publish failed."""
    loop = asyncio.get_running_loop()
    try:
        conn, rows = await loop.run_in_executor(executor, _take, pool, limit, by, list(published))
    except PoolTimeout as exc:
        raise unavailable(url, exc) from None
    except psycopg.OperationalError as exc:
        raise unavailable(url, exc) from None
    if conn is None:
        return 0, []
    given_back = False
    try:
        if await publish(rows):
            given_back = True  # by the call, whatever its COMMIT answers
            await loop.run_in_executor(executor, _commit_and_give_back, pool, conn)
            return sum(row[4] for row in rows), [row.id for row in rows]
        return None
    except psycopg.OperationalError as exc:
        raise unavailable(url, exc) from None
    finally:
        if not given_back:
            await loop.run_in_executor(executor, _give_back, pool, conn)


# What a look takes: its rows (written before a time, or with given ids), but for
# those the replica published from memory, deleted in the transaction held while they
# are published (`_look`), their locks skipped by other replicas' looks.
_TAKE = (
    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox WHERE {} "
    "AND id <> ALL(%s::bigint[]) ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED) "
    "RETURNING id, subject, payload, traceparent, messages"
)
TAKE = _TAKE.format("created_at < %s")
TAKE_IDS = _TAKE.format("id = ANY(%s::bigint[])")


def _take(
    pool: ConnectionPool[psycopg.Connection[Any]],
    limit: int,
    by: float | list[int],
    published: list[int],
) -> tuple[psycopg.Connection[Any] | None, list[OutboxRow]]:
    """A pooled connection with its transaction open and the rows it took, in id
    order; (None, []) with the connection given back when there were none. The
    BEGIN and the statement each wait for their answer: sent together in pipeline
    mode they were one round trip, and the pipeline's entry, sync and exit cost the
    pool's thread more CPU than the round trip it saved (decision 612); the pool's
    connections commit with synchronous_commit off (decision 611)."""
    conn = pool.getconn()
    try:
        conn.execute("BEGIN READ WRITE")
        statement = TAKE_IDS if isinstance(by, list) else TAKE
        taken = conn.execute(statement, (by, published, limit)).fetchall()
        if not taken:
            conn.rollback()
            pool.putconn(conn)
            return None, []
    except BaseException:
        _give_back(pool, conn)
        raise
    rows = [OutboxRow(int(r[0]), str(r[1]), bytes(r[2]), r[3], int(r[4])) for r in taken]
    rows.sort(key=lambda row: row[0])  # RETURNING keeps no order
    return conn, rows


def _commit_and_give_back(
    pool: ConnectionPool[psycopg.Connection[Any]], conn: psycopg.Connection[Any]
) -> None:
    """The published rows' delete committed, and the connection back: one hop."""
    try:
        conn.commit()
    finally:
        _give_back(pool, conn)


def _give_back(
    pool: ConnectionPool[psycopg.Connection[Any]], conn: psycopg.Connection[Any]
) -> None:
    """Back to the pool, with no transaction open (rows taken and not committed come
    back for the next drain)."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()
    pool.putconn(conn)
