"""TurnStatus's cache on SQLite is never staler than the database (decision 148).

The store's own tests below drive the real writer and its triggers; the RPC test
runs on both backends (PostgreSQL has no cache) and asks TurnStatus after every
acknowledged change of a turn's life."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.store.records import TurnStatusRow
from turnkeeper_server.store.sqlite import Database, Tx
from turnkeeper_server.store.status_cache import StatusCache

from tests.support.turns import events, start

pytestmark = pytest.mark.timeout(60)

_INSERT = (
    "INSERT INTO main.turns (turn_id, thread_id, agent, state, input_json, request_hash, "
    "created_at, updated_at) VALUES (?, ?, 'agent', 'RUNNING', '{}', '', 0, 0)"
)


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = Database(tmp_path / "turns.db", tmp_path / "sessions.db")
    database.open()
    try:
        yield database
    finally:
        database.close()


def cache_of(db: Database) -> StatusCache:
    assert db.status_cache is not None
    return db.status_cache


def status(db: Database, turn_id: str) -> TurnStatusRow | None:
    return cache_of(db).status(db.read_conn(), turn_id)


async def run(db: Database, sql: str, *params: Any) -> None:
    def op(tx: Tx) -> None:
        tx.execute(sql, params)

    await db.write(op)


async def test_every_kind_of_write_to_a_turn_row_reaches_the_next_status(db: Database) -> None:
    await run(db, _INSERT, "t1", "th1")
    assert (first := status(db, "t1")) is not None and first.state == "RUNNING"
    assert len(cache_of(db)) == 1  # kept: the next status is not read from the file

    await run(db, "UPDATE main.turns SET last_seq = 7 WHERE turn_id = 't1'")
    assert (row := status(db, "t1")) is not None and row.last_seq == 7
    await run(db, "UPDATE main.turns SET state = 'DONE', end_reason = 'done' WHERE turn_id = 't1'")
    assert (row := status(db, "t1")) is not None
    assert (row.state, row.end_reason) == ("DONE", "done")
    # INSERT OR REPLACE deletes and inserts: the insert's trigger sees it.
    await run(
        db,
        _INSERT.replace("INSERT", "INSERT OR REPLACE").replace("'RUNNING'", "'QUEUED'"),
        "t1",
        "th1",
    )
    assert (row := status(db, "t1")) is not None and row.state == "QUEUED"
    await run(db, "DELETE FROM main.turns WHERE turn_id = 't1'")
    assert status(db, "t1") is None
    assert len(cache_of(db)) == 0


async def test_a_write_that_leaves_the_status_columns_alone_keeps_the_row(db: Database) -> None:
    await run(db, _INSERT, "t1", "th1")
    status(db, "t1")
    await run(db, "UPDATE main.turns SET updated_at = 5 WHERE turn_id = 't1'")
    assert len(cache_of(db)) == 1


async def test_an_operation_rolled_back_leaves_the_status_as_it_was(db: Database) -> None:
    await run(db, _INSERT, "t1", "th1")
    status(db, "t1")

    def failing(tx: Tx) -> None:
        tx.execute("UPDATE main.turns SET state = 'FAILED' WHERE turn_id = 't1'")
        raise RuntimeError("the operation fails after its update")

    with pytest.raises(RuntimeError):
        await db.write(failing)
    assert (row := status(db, "t1")) is not None and row.state == "RUNNING"


async def test_a_row_read_while_a_transaction_changed_the_turn_is_not_kept(db: Database) -> None:
    await run(db, _INSERT, "t1", "th1")
    cache = cache_of(db)
    real = db.read_conn()

    class CommitsDuringTheRead:
        """The reader's SELECT returns what it read; meanwhile a transaction touches
        the turn and settles (the writer thread, between the read and the keeping)."""

        def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
            cursor: sqlite3.Cursor = real.execute(sql, params)
            cache.touched("t1")
            cache.settled()
            return cursor

    conn: Any = CommitsDuringTheRead()
    assert cache.status(conn, "t1") is not None
    assert len(cache) == 0  # the row read before that commit is not kept


async def test_a_turn_inside_an_unsettled_transaction_is_read_from_the_database(
    db: Database,
) -> None:
    await run(db, _INSERT, "t1", "th1")
    cache = cache_of(db)
    status(db, "t1")
    cache.touched("t1")  # the writer's transaction changed it and has not settled
    assert len(cache) == 0
    status(db, "t1")
    assert len(cache) == 0  # not kept while the change may still commit
    cache.settled()
    status(db, "t1")
    assert len(cache) == 1


def test_the_cache_keeps_at_most_its_capacity_oldest_first(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "t.db")
    conn.execute(
        "CREATE TABLE turns (turn_id, agent, state, attempts, last_seq, error, end_reason, "
        "owner_replica)"
    )
    for n in range(3):
        conn.execute("INSERT INTO turns VALUES (?, 'a', 'RUNNING', 0, 0, '', '', NULL)", (f"t{n}",))
    cache = StatusCache(capacity=2)
    for n in range(3):
        cache.status(conn, f"t{n}")
    cache.status(conn, "nobody")  # an unknown turn is not kept
    assert len(cache) == 2
    cache.touched("t0")  # the oldest is gone already; t1 and t2 are kept
    cache.settled()
    assert len(cache) == 2


@pytest.mark.both_backends
async def test_turn_status_follows_every_acknowledged_step_of_a_turn(
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    async def asked(turn_id: str) -> pb.TurnStatusResponse:
        # Twice: the second answer is the kept one where there is a cache.
        first = await turns.TurnStatus(pb.TurnStatusRequest(turn_id=turn_id))
        assert await turns.TurnStatus(pb.TurnStatusRequest(turn_id=turn_id)) == first
        return first

    await start(turns, turn_id="c1", thread_id="cth1")
    assert (await asked("c1")).state == pb.TURN_STATE_RUNNING
    for n in range(1, 40, 3):
        await turns.AppendEvents(
            pb.AppendEventsRequest(turn_id="c1", events=events(n, "token", "token", "token"))
        )
        assert (await asked("c1")).last_seq == n + 2
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="c1", outcome=pb.OUTCOME_DONE))
    assert (await asked("c1")).state == pb.TURN_STATE_DONE

    await start(turns, turn_id="c2", thread_id="cth1")
    assert (await asked("c2")).state == pb.TURN_STATE_RUNNING
    await turns.CancelTurn(pb.CancelTurnRequest(turn_id="c2", reason="test"))
    cancelled = await asked("c2")
    assert (cancelled.state, cancelled.error) == (pb.TURN_STATE_CANCELLED, "test")

    await checkpoints.DeleteThread(cpb.DeleteThreadRequest(thread_id="cth1"))
    for turn_id in ("c1", "c2"):
        assert (await asked(turn_id)).state == pb.TURN_STATE_UNKNOWN
    with pytest.raises(grpc.aio.AioRpcError):
        await turns.GetTurn(pb.GetTurnRequest(turn_id="c1"))
