"""The PostgreSQL store's pooled reads and its listener (decisions 361 and 362).

A pooled read runs on an autocommit connection in pipeline mode, its snapshot opened
by its first statement, with no check on checkout: a connection found dead with the
server is dropped and the read runs again on another; a read that refuses leaves no
transaction open. The listener skips what this replica's own writer announced (its
commit woke this replica's watchers already) and delivers what another replica's did.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import psycopg
import pytest
from turnkeeper_server.store.contract import Conn, Tx
from turnkeeper_server.store.postgres import CHANNEL, PostgresDatabase

pytestmark = [pytest.mark.postgres_only, pytest.mark.timeout(60)]


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresDatabase]:
    db = PostgresDatabase(database_url, pool_size=2)
    db.open()
    try:
        yield db
    finally:
        db.close()


def backend_and_snapshot(conn: Conn) -> tuple[int, str, str]:
    row = conn.execute(
        "SELECT pg_backend_pid(), current_setting('transaction_isolation'), "
        "current_setting('transaction_read_only')"
    ).fetchone()
    return int(row[0]), str(row[1]), str(row[2])


async def test_a_read_runs_on_a_read_only_snapshot_and_leaves_no_transaction(
    store: PostgresDatabase, backend: str, database_url: str
) -> None:
    _, isolation, read_only = await store.read(backend_and_snapshot)
    assert (isolation, read_only) == ("repeatable read", "on")

    def refuses(conn: Conn) -> None:
        conn.execute("SELECT 1").fetchone()
        raise LookupError("no such thing")

    with pytest.raises(LookupError):
        await store.read(refuses)
    with psycopg.connect(database_url, autocommit=True) as admin:
        open_ = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state LIKE 'idle in transaction%'"
        ).fetchone()
    assert open_ is not None and open_[0] == 0
    assert (await store.read(backend_and_snapshot))[1:] == ("repeatable read", "on")


async def test_a_read_whose_pooled_connections_died_runs_again_on_new_ones(
    store: PostgresDatabase, backend: str, database_url: str
) -> None:
    # Reads at once, so that the pool holds connections to kill.
    both = await asyncio.gather(store.read(backend_and_snapshot), store.read(backend_and_snapshot))
    pids = {pid for pid, _, _ in both}
    with psycopg.connect(database_url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))

    pid, isolation, _ = await store.read(backend_and_snapshot)

    assert pid not in pids and isolation == "repeatable read"


async def test_the_listener_skips_what_this_replica_announced(
    store: PostgresDatabase, backend: str, database_url: str
) -> None:
    heard: list[str | None] = []
    ready, other = asyncio.Event(), asyncio.Event()

    def on_change(turn_id: str | None) -> None:
        heard.append(turn_id)
        {"ready": ready, "from-another-replica": other}.get(turn_id or "", asyncio.Event()).set()

    store.listen(on_change)
    with psycopg.connect(database_url, autocommit=True) as admin:
        # Listening before anything is announced: notified until it hears one.
        for _ in range(300):
            admin.execute("SELECT pg_notify(%s, 'ready')", (CHANNEL,))
            try:
                await asyncio.wait_for(ready.wait(), 0.1)
                break
            except TimeoutError:
                continue

        def announce(tx: Tx) -> None:
            tx.announce(["from-this-replica"])

        await store.write(announce)
        # Committed after this replica's: delivered after it on the same connection.
        admin.execute("SELECT pg_notify(%s, 'from-another-replica')", (CHANNEL,))
        await asyncio.wait_for(other.wait(), 30)

    assert "from-this-replica" not in heard
    assert heard[-1] == "from-another-replica"
