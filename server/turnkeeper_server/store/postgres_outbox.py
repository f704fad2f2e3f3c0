"""PostgreSQL's outbox drain: the publisher's rows taken and deleted in a
transaction held while they are published, their locks skipped by other replicas'
drains."""

from __future__ import annotations

import asyncio
import contextlib
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from turnkeeper_server.store.contract import Publish
from turnkeeper_server.store.postgres_conn import unavailable
from turnkeeper_server.store.records import OutboxRow

# How soon after a drain that found the outbox empty (or took less than it asked)
# the next finds it empty without looking, if this replica's writer committed no
# outbox row since: the publisher looks again right after each batch it sent
# (decision 432). Longer than that, never as long as its idle poll, which is what
# finds other replicas' rows.
QUIET_FOR = 0.05


class OutboxDrain:
    """A replica's drains of the outbox, and what lets one skip its look: the
    groups its writer committed with outbox rows (`committed`), and when a drain
    last saw the outbox empty and at which count."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._commits = 0
        self._quiet: tuple[float, int] | None = None

    def committed(self) -> None:
        """A group with outbox rows committed: counted on the writer thread, before
        its callers hear of it."""
        self._commits += 1

    async def drain(
        self,
        pool: ConnectionPool[psycopg.Connection[Any]],
        executor: ThreadPoolExecutor,
        limit: int,
        publish: Publish,
    ) -> int:
        """Take rows (deleted, in a transaction held while they are published) with
        FOR UPDATE SKIP LOCKED: another replica's publisher skips them, and takes them
        over if this one dies or fails to publish (the transaction rolls back, the
        rows come back). One statement takes and deletes them, after its BEGIN;
        the COMMIT is asynchronous (decision 430): the delete of rows already
        published needs no WAL flush, a crash that loses it publishes them again,
        which JetStream drops by Nats-Msg-Id, as after a crash before the delete."""
        commits = self._commits
        if (
            self._quiet is not None
            and self._quiet[1] == commits
            and time.monotonic() - self._quiet[0] < QUIET_FOR
        ):
            return 0  # nothing written here since it was seen empty a moment ago
        loop = asyncio.get_running_loop()
        try:
            conn, rows = await loop.run_in_executor(executor, _take, pool, limit)
        except PoolTimeout as exc:
            raise unavailable(self.url, exc) from None
        except psycopg.OperationalError as exc:
            raise unavailable(self.url, exc) from None
        if conn is None:
            self._quiet = (time.monotonic(), commits)
            return 0
        committed = given_back = False
        try:
            if await publish(rows):
                given_back = True  # by the call, whatever its COMMIT answers
                await loop.run_in_executor(executor, _commit_and_give_back, pool, conn)
                committed = True
                taken = sum(row[4] for row in rows)
                if taken < limit:  # all there was, but for what committed meanwhile
                    self._quiet = (time.monotonic(), commits)
                return taken
            return 0
        except psycopg.OperationalError as exc:
            raise unavailable(self.url, exc) from None
        finally:
            if not committed:
                self._quiet = None  # its rows come back
            if not given_back:
                await loop.run_in_executor(executor, _give_back, pool, conn)


# What a drain takes: its rows, deleted in the transaction held while they are
# published (`OutboxDrain.drain`), their locks skipped by other replicas' drains.
TAKE = (
    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT %s "
    "FOR UPDATE SKIP LOCKED) RETURNING id, subject, payload, traceparent, messages"
)


def _take(
    pool: ConnectionPool[psycopg.Connection[Any]], limit: int
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
        taken = conn.execute(TAKE, (limit,)).fetchall()
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
