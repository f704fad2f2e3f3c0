"""Group commit on both backends (store/group_commit.py, decision 265): writes queued
together share one transaction, each is answered only once the group committed,
and an operation that fails, by its own refusal or the database's, is left out
alone while the others of its group commit. On PostgreSQL the writer runs its
groups in pipeline mode, finds the failing operation by running the group again
carefully, and replaces a connection that died between groups."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.store.contract import Store, Tx
from turnkeeper_server.store.postgres import PostgresDatabase
from turnkeeper_server.store.sqlite import Database

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(60)]

TABLE = "CREATE TABLE IF NOT EXISTS main.scratch (k TEXT PRIMARY KEY, v INTEGER NOT NULL)"


@pytest.fixture
async def store(tmp_path: Path, database_url: str | None) -> AsyncIterator[Store]:
    db: Store = (
        Database(tmp_path / "turns.db", tmp_path / "sessions.db")
        if database_url is None
        else PostgresDatabase(database_url)
    )
    db.open()
    try:
        await db.write(lambda tx: tx.execute(TABLE))
        yield db
    finally:
        db.close()


def insert(key: str, value: int | None = 1) -> Callable[[Tx], str]:
    def op(tx: Tx) -> str:
        tx.execute("INSERT INTO main.scratch (k, v) VALUES (?, ?)", (key, value))
        return key

    return op


def keys(db: Store) -> list[str]:
    return [row[0] for row in db.read_conn().execute("SELECT k FROM main.scratch ORDER BY k")]


def record_groups(db: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each group the writer runs from now on."""
    sizes: list[int] = []
    writer: Any = db._writer  # type: ignore[attr-defined]
    run_group = writer.run_group

    def recorded(group: list[Any]) -> None:
        sizes.append(len(group))
        run_group(group)

    monkeypatch.setattr(writer, "run_group", recorded)
    return sizes


async def in_one_group(db: Store, ops: list[Callable[[Tx], Any]]) -> list[Any]:
    """Run `ops` as one group: the writer is held busy while they are queued."""
    release = threading.Event()
    held = db.queue_write(lambda tx: release.wait(10))
    futures = [db.queue_write(op) for op in ops]
    release.set()
    await held
    return await asyncio.gather(*futures, return_exceptions=True)


async def test_a_commit_whose_caller_left_still_runs_its_after_commit_callbacks(
    store: Store,
) -> None:
    # A caller cancelled while its write waits in the queue (a gRPC call whose client
    # left, or past its deadline): the writer commits it all the same, and what it
    # committed must still wake the turn's followers and the outbox publisher.
    woken = asyncio.Event()

    def op(tx: Tx) -> str:
        tx.execute("INSERT INTO main.scratch (k, v) VALUES (?, ?)", ("left", 1))
        tx.after_commit(woken.set)
        return "left"

    release = threading.Event()
    held = store.queue_write(lambda tx: release.wait(10))
    store.queue_write(op).cancel()
    release.set()
    await held
    await asyncio.wait_for(woken.wait(), 10)
    assert keys(store) == ["left"]


async def test_writes_queued_together_share_a_commit(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = record_groups(store, monkeypatch)

    done = await asyncio.gather(*(store.write(insert(f"k{n:03}")) for n in range(64)))

    assert done == [f"k{n:03}" for n in range(64)]
    assert keys(store) == done
    # Fewer transactions than writes: at least one group held several.
    assert sum(sizes) == 64
    assert len(sizes) < 64, sizes


async def test_a_rider_joins_the_next_group_and_a_later_one_replaces_it(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Decision 372: a write nobody waits for (the outbox's delete) makes no commit of
    # its own while others are written.
    writer: Any = store._writer  # type: ignore[attr-defined]
    running, release = threading.Event(), threading.Event()

    def hold(tx: Tx) -> bool:
        running.set()
        return release.wait(10)

    held = store.queue_write(hold)
    await asyncio.to_thread(running.wait, 10)  # the writer is in held's group
    sizes = record_groups(store, monkeypatch)
    first = writer.ride("scratch", insert("r1"))
    second = writer.ride("scratch", insert("r2"))
    assert await first is None  # replaced before the writer took it: never run
    later = store.queue_write(insert("w1"))
    release.set()
    await held
    assert await later == "w1" and await second == "r2"
    assert keys(store) == ["r2", "w1"]
    assert sizes == [2], sizes  # the rider rode w1's group, ahead of it


async def test_a_rider_alone_commits_after_a_short_wait(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer: Any = store._writer  # type: ignore[attr-defined]
    sizes = record_groups(store, monkeypatch)
    assert await asyncio.wait_for(writer.ride("scratch", insert("alone")), 10) == "alone"
    assert keys(store) == ["alone"] and sizes == [1]


async def test_an_operation_that_refuses_itself_is_left_out_alone(store: Store) -> None:
    def refuses(tx: Tx) -> None:
        tx.execute("INSERT INTO main.scratch (k, v) VALUES (?, ?)", ("b", 1))
        raise InvalidArgument("b is refused after its insert")

    a, b, c = await in_one_group(store, [insert("a"), refuses, insert("c")])

    assert (a, c) == ("a", "c")
    assert isinstance(b, InvalidArgument)
    assert keys(store) == ["a", "c"]


@pytest.mark.parametrize("wrote", [False, True], ids=["having-read", "having-sent"])
async def test_an_operation_that_refuses_itself_having_read_costs_the_group_no_rerun(
    store: Store, backend: str, wrote: bool
) -> None:
    # Decision 670: on PostgreSQL's fast path an operation that refused itself
    # having only read (a locked row, no turn record) is left out and the group
    # goes on; one that wrote still has its group rolled back and run without it.
    runs: list[str] = []

    def counted(key: str) -> Callable[[Tx], str]:
        def op(tx: Tx) -> str:
            runs.append(key)
            return insert(key)(tx)

        return op

    def refuses(tx: Tx) -> None:
        runs.append("b")
        # Columns are named so too (a turn's `updated_at`): only what the statement
        # does counts.
        tx.execute(
            f"SELECT k AS updated_at, v AS inserted FROM main.scratch WHERE k = ?{tx.for_update}",
            ("a",),
        ).fetchall()
        tx.forget_turn("a")  # as lock_turn does (a heartbeat of a turn just finished)
        if wrote:
            tx.send("INSERT INTO main.scratch (k, v) VALUES (?, ?)", ("b", 1))
        raise InvalidArgument("b is refused")

    a, b, c = await in_one_group(store, [counted("a"), refuses, counted("c")])

    assert (a, c) == ("a", "c")
    assert isinstance(b, InvalidArgument)
    assert keys(store) == ["a", "c"]
    # On main PostgreSQL ran ["a", "b", "a", "c"] having read too: a ran twice.
    assert runs == (["a", "b", "a", "c"] if wrote and backend == "postgres" else ["a", "b", "c"])


async def test_an_operation_the_database_refuses_is_left_out_alone(
    store: Store, backend: str
) -> None:
    def null_then_read(tx: Tx) -> None:
        insert("d", None)(tx)
        tx.execute("SELECT count(*) FROM main.scratch").fetchone()

    # b's and d's statements violate NOT NULL. On PostgreSQL b's error arrives in
    # the pipeline after b returned, and the group is run again to find whose it
    # is; d's arrives in d's own read.
    a, b, c, d, e = await in_one_group(
        store, [insert("a"), insert("b", None), insert("c"), null_then_read, insert("e")]
    )

    assert (a, c, e) == ("a", "c", "e")
    assert "null" in str(b).lower(), b
    assert "null" in str(d).lower(), d
    assert keys(store) == ["a", "c", "e"]
    # The writer goes on as before.
    assert await store.write(insert("f")) == "f"


@pytest.mark.postgres_only
async def test_jsonb_the_database_refuses_is_invalid_argument(store: Store, backend: str) -> None:
    def nul_in_json(tx: Tx) -> None:
        tx.execute("SELECT ?::jsonb", ('{"user": "zo\\u0000"}',))

    a, refused = await in_one_group(store, [insert("a"), nul_in_json])

    assert a == "a"
    assert isinstance(refused, InvalidArgument)
    assert "PostgreSQL refused the data written" in str(refused)
    assert keys(store) == ["a"]


@pytest.mark.postgres_only
async def test_a_writer_connection_that_died_is_replaced_between_groups(
    store: Store, backend: str, database_url: str
) -> None:
    def backend_pid(tx: Tx) -> int:
        return int(tx.execute("SELECT pg_backend_pid()").fetchone()[0])

    first = await store.write(backend_pid)
    with psycopg.connect(database_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (first,))

    # Acknowledged on a new connection, not refused for the old one.
    assert await store.write(insert("after")) == "after"
    assert await store.write(backend_pid) != first
    assert keys(store) == ["after"]


async def test_the_writer_goes_on_after_refusals_with_statements_it_ran_before(
    store: Store,
) -> None:
    # The same statements before and after rollbacks (a refusal running fast, a
    # database error found carefully): psycopg's prepared statements did not
    # survive them in pipeline mode ("prepared statement ... does not exist").
    for n in range(8):
        assert await store.write(insert(f"a{n}")) == f"a{n}"
    for n in range(4):
        done = await in_one_group(store, [insert(f"b{n}"), insert(f"x{n}", None), insert(f"c{n}")])
        assert done[0] == f"b{n}" and done[2] == f"c{n}", done
    for n in range(8):
        assert await store.write(insert(f"d{n}")) == f"d{n}"
    assert len(keys(store)) == 8 + 4 * 2 + 8


async def test_statements_larger_than_the_sockets_buffers_are_sent_whole(store: Store) -> None:
    # Statements of 4 MiB each, far past any socket's buffers, one after another
    # while the database is still storing the one before, between two small ones.
    # psycopg's pipeline left the last one's tail unsent and waited for its answer
    # for ever (decision 269).
    count, size = 8, 4 << 20

    def large(tx: Tx) -> str:
        for n in range(count):
            tx.execute(
                "INSERT INTO main.scratch (k, v) VALUES (?, length(CAST(? AS TEXT)))",
                (f"big{n}", os.urandom(size // 2).hex()),
            )
        return "big"

    done = await in_one_group(store, [insert("a"), large, insert("c")])

    assert done == ["a", "big", "c"]
    assert keys(store) == ["a", *(f"big{n}" for n in range(count)), "c"]
    stored = store.read_conn().execute("SELECT sum(v) FROM main.scratch WHERE k LIKE 'big%'")
    assert stored.fetchone()[0] == count * size
