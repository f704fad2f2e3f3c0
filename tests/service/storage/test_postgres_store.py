"""The PostgreSQL store's pooled reads, its listener and its writer's prepared
statements (decisions 361-363).

A pooled read runs on an autocommit connection in pipeline mode, its snapshot opened
by its first statement, with no check on checkout: a connection found dead with the
server is dropped and the read runs again on another; a read that refuses leaves no
transaction open. The listener skips what this replica's own writer announced (its
commit woke this replica's watchers already) and delivers what another replica's did.
The writer prepares every statement at its first run, and what it prepared survives
every way a group rolls back.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncIterator, Callable

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


async def test_prepared_statements_survive_groups_mixing_refusals_errors_and_races(
    database_url: str, backend: str
) -> None:
    # Every statement is prepared at its first run (decision 363). Groups that mix
    # the writer's every way of rolling back (an operation refusing itself after its
    # statement, a NOT NULL error found running the group carefully, a duplicate key
    # taken for a lost race) with reads mid-group and the same statements before and
    # after: psycopg dropped what it had just prepared after such rollbacks
    # ("prepared statement ... does not exist").
    db = PostgresDatabase(database_url, pool_size=1)
    db.open()
    try:
        await db.write(lambda tx: tx.execute(TABLE))
        rng = random.Random(363)
        kinds = ["ok", "ok", "ok", "read", "null", "refuse", "duplicate"]
        expected: set[str] = {"taken"}
        await db.write(_insert("taken"))
        for group_no in range(12):
            plan = [(rng.choice(kinds), f"g{group_no}k{n}") for n in range(6)]
            done = await _in_one_group(db, [_op(kind, key) for kind, key in plan])
            for (kind, key), outcome in zip(plan, done, strict=True):
                assert not isinstance(outcome, psycopg.errors.InvalidSqlStatementName), outcome
                if kind in ("ok", "read"):
                    assert outcome == key, (kind, outcome)
                    expected.add(key)
                else:
                    assert isinstance(outcome, Exception), (kind, outcome)
        assert await db.write(_insert("last")) == "last"
        stored = await db.read(lambda conn: {r[0] for r in conn.execute(KEYS).fetchall()})
        assert stored == expected | {"last"}
    finally:
        db.close()


TABLE = "CREATE TABLE IF NOT EXISTS main.scratch (k TEXT PRIMARY KEY, v INTEGER NOT NULL)"
KEYS = "SELECT k FROM main.scratch"


def _insert(key: str, value: int | None = 1) -> Callable[[Tx], str]:
    def op(tx: Tx) -> str:
        tx.execute("INSERT INTO main.scratch (k, v) VALUES (?, ?)", (key, value))
        return key

    return op


def _op(kind: str, key: str) -> Callable[[Tx], str]:
    def op(tx: Tx) -> str:
        if kind == "null":
            return _insert(key, None)(tx)
        if kind == "duplicate":
            return _insert("taken")(tx)
        _insert(key)(tx)
        if kind == "read":
            tx.execute("SELECT count(*) FROM main.scratch WHERE k <> ?", (key,)).fetchone()
        if kind == "refuse":
            raise LookupError(f"{key} refuses itself")
        return key

    return op


async def _in_one_group(db: PostgresDatabase, ops: list[Callable[[Tx], str]]) -> list[object]:
    """`ops` as one group: the writer is held busy while they are queued."""
    release = threading.Event()
    held = db.queue_write(lambda tx: release.wait(10))
    futures = [db.queue_write(op) for op in ops]
    release.set()
    await held
    return await asyncio.gather(*futures, return_exceptions=True)
