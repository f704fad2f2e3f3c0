"""The PostgreSQL store's pooled reads, its listener, its writer's prepared
statements (decisions 361-363), its notifications and its outbox drain's look at
the table (430, 431; what its own writer wrote goes from memory:
tests/service/outbox/test_outbox_from_memory.py), its reads (433, 434).

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
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
import pytest
from psycopg import pq
from turnkeeper_server.store.contract import Conn, Tx
from turnkeeper_server.store.postgres import PostgresDatabase
from turnkeeper_server.store.postgres_conn import PgConn
from turnkeeper_server.store.postgres_notify import CHANNEL, Listener, announced
from turnkeeper_server.store.records import OutboxRow

from tests.support.postgres import database_of, replica

pytestmark = [pytest.mark.postgres_only, pytest.mark.timeout(60)]


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[PostgresDatabase]:
    with replica(database_url) as db:
        yield db


def backend_and_snapshot(conn: Conn) -> tuple[int, str, str]:
    row = conn.execute(
        "SELECT pg_backend_pid(), current_setting('transaction_isolation'), "
        "current_setting('transaction_read_only')"
    ).fetchone()
    return int(row[0]), str(row[1]), str(row[2])


def in_a_snapshot(conn: Conn) -> tuple[int, str, str]:
    # Two statements: a read that needs its snapshot (decision 433).
    conn.execute("SELECT 1").fetchone()
    return backend_and_snapshot(conn)


async def test_a_read_runs_on_a_read_only_snapshot_and_leaves_no_transaction(
    store: PostgresDatabase, backend: str, database_url: str
) -> None:
    _, isolation, read_only = await store.read(in_a_snapshot)
    assert (isolation, read_only) == ("repeatable read", "on")

    def refuses(conn: Conn) -> None:
        conn.execute("SELECT 1").fetchone()
        conn.execute("SELECT 2").fetchone()
        raise LookupError("no such thing")

    with pytest.raises(LookupError):
        await store.read(refuses)
    with psycopg.connect(database_url, autocommit=True) as admin:
        open_ = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND state LIKE 'idle in transaction%'"
        ).fetchone()
    assert open_ is not None and open_[0] == 0
    assert (await store.read(in_a_snapshot))[1:] == ("repeatable read", "on")

    def pipeline_status(conn: Conn) -> pq.PipelineStatus:
        conn.execute("SELECT 1").fetchone()
        conn.execute("SELECT 2").fetchone()
        assert isinstance(conn, PgConn)
        return pq.PipelineStatus(conn.raw.pgconn.pipeline_status)

    # Decision 434: a snapshot's statements are sent and answered in turn.
    assert await store.read(pipeline_status) == pq.PipelineStatus.OFF


async def test_a_read_of_one_statement_runs_without_a_transaction_until_it_makes_two(
    store: PostgresDatabase, backend: str
) -> None:
    # Decision 433: one statement is its own snapshot. A read that makes a second
    # runs again from the start on a snapshot, and on one at once from then on.
    assert (await store.read(backend_and_snapshot))[1:] == ("read committed", "on")
    runs: list[int] = []

    def sometimes_two(conn: Conn) -> tuple[str, str]:
        runs.append(1)
        first = conn.execute("SELECT current_setting('transaction_isolation')").fetchone()
        if len(runs) >= 2:
            conn.execute("SELECT 1").fetchone()
        return str(first[0]), str(first[0])

    assert await store.read(sometimes_two) == ("read committed", "read committed")
    assert len(runs) == 1
    # The second statement comes: run again, the first statement in the snapshot too.
    assert await store.read(sometimes_two) == ("repeatable read", "repeatable read")
    assert len(runs) == 3
    assert await store.read(sometimes_two) == ("repeatable read", "repeatable read")
    assert len(runs) == 4

    def swallows(conn: Conn) -> str:
        conn.execute("SELECT 1").fetchone()
        try:
            conn.execute("SELECT 2").fetchone()
        except Exception:  # a read's own handling never takes the second statement's rerun
            return "swallowed"
        return str(conn.execute("SELECT current_setting('transaction_isolation')").fetchone()[0])

    assert await store.read(swallows) == "repeatable read"

    def writes(conn: Conn) -> None:
        conn.execute("CREATE TABLE main.not_from_a_read (k TEXT)")

    with pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        await store.read(writes)


@pytest.mark.parametrize(
    "read", [backend_and_snapshot, in_a_snapshot], ids=["one-statement", "snapshot"]
)
async def test_a_read_whose_pooled_connections_died_runs_again_on_new_ones(
    store: PostgresDatabase,
    backend: str,
    database_url: str,
    read: Callable[[Conn], tuple[int, str, str]],
) -> None:
    # Reads at once, so that the pool holds connections to kill.
    both = await asyncio.gather(store.read(in_a_snapshot), store.read(in_a_snapshot))
    pids = {pid for pid, _, _ in both}
    with psycopg.connect(database_url, autocommit=True) as admin:
        for pid in pids:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", (pid,))

    pid, isolation, _ = await store.read(read)

    expected = "repeatable read" if read is in_a_snapshot else "read committed"
    assert pid not in pids and isolation == expected


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


async def test_a_group_announces_its_turns_in_one_notification(
    store: PostgresDatabase, backend: str, database_url: str
) -> None:
    # Decision 431: one notification per group, each turn once, none for an
    # operation that was left out; as many as the payload limit needs, no more.
    with psycopg.connect(database_url, autocommit=True) as other:
        other.execute(f"LISTEN {CHANNEL}")

        def announcing(*turn_ids: str, refuse: bool = False) -> Callable[[Tx], str]:
            def op(tx: Tx) -> str:
                tx.announce(list(turn_ids))
                if refuse:
                    raise LookupError("refused after announcing")
                return "ok"

            return op

        ops = [announcing("t1", "t2"), announcing("gone", refuse=True), announcing("t1", "t3")]
        done = await _in_one_group(store, ops)
        assert isinstance(done[1], LookupError)
        # 300 ids of 50 characters, 53 bytes each in JSON: three notifications.
        long_ids = [f"turn-{n:04d}-" + "x" * 40 for n in range(300)]
        await store.write(announcing(*long_ids))
        notes = _notes(other, 4)

    assert [announced(note.payload) for note in notes[:1]] == [["t1", "t2", "t3"]]
    assert len(notes) == 4 and all(len(note.payload.encode()) <= 8000 for note in notes)
    assert [t for note in notes[1:] for t in announced(note.payload)] == long_ids


async def test_the_listener_wakes_each_turn_a_notification_names(
    store: PostgresDatabase, backend: str, database_url: str
) -> None:
    heard: list[str | None] = []
    done = asyncio.Event()

    def on_change(turn_id: str | None) -> None:
        heard.append(turn_id)
        if turn_id == "last":
            done.set()

    listener = Listener(database_url, asyncio.get_running_loop(), on_change)
    listener.start()
    try:
        with psycopg.connect(database_url, autocommit=True) as admin:
            # Until the listener is listening: each plain id is one turn (a replica
            # of before decision 431 sends one id a notification).
            while not heard:
                admin.execute("SELECT pg_notify(%s, 'plain')", (CHANNEL,))
                await asyncio.sleep(0.05)
            await store.write(lambda tx: tx.announce(["a", "b"]))
            admin.execute("SELECT pg_notify(%s, 'last')", (CHANNEL,))
            await asyncio.wait_for(done.wait(), 30)
    finally:
        listener.stop()
    assert heard[-3:] == ["a", "b", "last"] and set(heard[:-3]) == {"plain"}


def _notes(conn: psycopg.Connection[object], n: int) -> list[psycopg.Notify]:
    notes: list[psycopg.Notify] = []
    for _ in range(100):
        notes.extend(conn.notifies(timeout=0.2, stop_after=n - len(notes)))
        if len(notes) >= n:
            break
    # Nothing more is coming.
    notes.extend(conn.notifies(timeout=0.3))
    return notes


async def test_a_drain_takes_its_rows_in_one_statement_and_gives_back_what_it_did_not_publish(
    store: PostgresDatabase, backend: str, database_url: str
) -> None:
    # Decision 430: the rows are deleted by the statement that takes them, in a
    # transaction held while they are published; a failed publish gives them back,
    # and another drain meanwhile skips them.
    def rows(tx: Tx) -> None:
        for n in range(5):
            tx.execute(
                "INSERT INTO main.outbox (subject, payload, created_at) VALUES (?, ?, ?)",
                (f"s.{n}", b"x", 0.0),
            )

    await store.write(rows)
    seen: list[tuple[list[int], str, int]] = []
    inner: list[int] = []
    nested = False

    def publisher(ok: bool) -> Callable[[list[OutboxRow]], Awaitable[bool]]:
        async def publish(taken: list[OutboxRow]) -> bool:
            nonlocal nested
            with psycopg.connect(database_url, autocommit=True) as admin:
                holder = admin.execute(
                    "SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                    "AND state = 'idle in transaction'"
                ).fetchone()
                left = admin.execute("SELECT count(*) FROM outbox").fetchone()
            assert holder is not None and left is not None
            seen.append(([row[0] for row in taken], holder[0], left[0]))
            if not nested:  # another replica's drain meanwhile skips the rows this one holds
                nested = True
                inner.append(await other.drain_outbox(10, publisher(True)))
            return ok

        return publish

    with replica(database_url) as other:
        assert await store.drain_outbox(3, publisher(False)) == 0
        assert await store.drain_outbox(3, publisher(True)) == 3
        assert await store.drain_outbox(3, publisher(True)) == 0

    first, rest, again = (ids for ids, _, _ in seen)
    assert first == again and first + rest == sorted(first + rest) and len(rest) == 2
    assert inner == [2]
    assert all(query.startswith("DELETE FROM outbox") for _, query, _ in seen)
    # Deleted, not committed: still there for others; the second take after the
    # inner drain's commit.
    assert [left for _, _, left in seen] == [5, 5, 3]
    assert store.outbox_backlog() == 0


async def test_a_drain_is_its_begin_and_its_statement_on_connections_that_commit_unflushed(
    store: PostgresDatabase, backend: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Decision 611: the pool's connections commit with synchronous_commit off (the
    # drain's delete is the one write they make), so a drain sends no SET LOCAL.
    await store.write(
        lambda tx: tx.execute(
            "INSERT INTO main.outbox (subject, payload, created_at) VALUES (?, ?, ?)",
            ("s", b"x", 0.0),
        )
    )
    sent: list[str] = []
    real = psycopg.Connection.execute
    ours = database_of(database_url)

    def counted(self: psycopg.Connection[Any], query: Any, *args: Any, **kw: Any) -> Any:
        if self.info.dbname == ours:
            sent.append(str(query))
        return real(self, query, *args, **kw)

    monkeypatch.setattr(psycopg.Connection, "execute", counted)

    async def publish(taken: list[OutboxRow]) -> bool:
        return True

    assert await store.drain_outbox(10, publish) == 1
    assert [s.split()[0] for s in sent] == ["BEGIN", "DELETE"]
    setting = await store.read(lambda conn: conn.execute("SHOW synchronous_commit").fetchone())
    assert setting[0] == "off"
