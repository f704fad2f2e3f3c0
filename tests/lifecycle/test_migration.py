"""Schema migrations 2 (the audit log, the outbox's trace context) and 3 (the life of a
turn) on a journal written by an earlier release, on SQLite (turns.db rebuilt) and
PostgreSQL (altered in place): the turns keep their rows and rowids (ListTurns' page
tokens), the new states are storable, and the audit table is there."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from turnkeeper_server.store import postgres_schema
from turnkeeper_server.store.postgres import PostgresDatabase
from turnkeeper_server.store.sqlite import Database
from turnkeeper_server.store.sqlite_schema import TURNS_MIGRATIONS, migrate

from tests.support.postgres import PostgresCluster

PG_MIGRATIONS = list(postgres_schema.TURNKEEPER_MIGRATIONS)


@pytest.mark.parametrize("from_version", [1, 2, 3])
def test_an_older_journal_is_rebuilt_with_its_rows(tmp_path: Path, from_version: int) -> None:
    turns_path = tmp_path / "turns.db"
    with sqlite3.connect(turns_path, isolation_level=None) as conn:
        conn.execute("BEGIN")
        migrate(conn, "main", TURNS_MIGRATIONS[:from_version])
        for rowid, turn_id, state in ((7, "t-old", "DONE"), (9, "t-live", "PARKED")):
            conn.execute(
                "INSERT INTO turns (rowid, turn_id, thread_id, agent, state, input_json, "
                "request_hash, created_at, updated_at) VALUES (?, ?, 'th', 'a', ?, 'null', "
                "'h', 1.0, 2.0)",
                (rowid, turn_id, state),
            )
        conn.execute("COMMIT")

    db = Database(turns_path, tmp_path / "sessions.db")
    db.open()
    db.close()

    with sqlite3.connect(turns_path) as conn:
        assert conn.execute("SELECT max(version) FROM turnkeeper_schema_version").fetchone() == (
            len(TURNS_MIGRATIONS),
        )
        rows = conn.execute(
            "SELECT rowid, turn_id, state, end_reason, pruned FROM turns ORDER BY rowid"
        ).fetchall()
        assert rows == [(7, "t-old", "DONE", "", 0), (9, "t-live", "PARKED", "", 0)]
        conn.execute("UPDATE turns SET state = 'CANCELLED' WHERE turn_id = 't-live'")
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {
            "turns_one_live_per_thread",
            "turns_queued",
            "turns_to_prune",
            "turns_to_delete",
        } <= indexes
        assert conn.execute("SELECT count(*) FROM audit").fetchone() == (0,)
        outbox = {r[1] for r in conn.execute("PRAGMA table_info(outbox)")}
        assert "traceparent" in outbox


def test_a_version_1_postgres_journal_is_altered_in_place(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_cluster.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        # The previous release's schema: only its one migration is known.
        monkeypatch.setattr(postgres_schema, "TURNKEEPER_MIGRATIONS", PG_MIGRATIONS[:1])
        assert postgres_schema.migrate(conn) == 1
        for turn_id, thread_id, state, attempts in (
            ("t-old", "th", "DONE", 2),
            ("t-live", "th", "PARKED", 1),
        ):
            conn.execute(
                "INSERT INTO turns (turn_id, thread_id, agent, state, attempts, input_json, "
                "request_hash, created_at, updated_at) VALUES (%s, %s, 'a', %s, %s, 'null', "
                "'h', 1.0, 2.0)",
                (turn_id, thread_id, state, attempts),
            )
        before = conn.execute("SELECT turn_id, rowid FROM turns ORDER BY rowid").fetchall()
        monkeypatch.setattr(postgres_schema, "TURNKEEPER_MIGRATIONS", PG_MIGRATIONS)

    db = PostgresDatabase(url)
    db.open()
    db.close()

    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SELECT max(version) FROM turnkeeper_schema_version").fetchone()
        assert version == (len(PG_MIGRATIONS),)
        rows = conn.execute(
            "SELECT turn_id, rowid, state, end_reason, pruned, charged FROM turns ORDER BY rowid"
        ).fetchall()
        # Rows and rowids (ListTurns' page tokens) kept; past crashes were all charged.
        assert [r[:2] for r in rows] == before
        assert [r[2:] for r in rows] == [("DONE", "", 0, 2), ("PARKED", "", 0, 1)]
        # Any number of QUEUED turns beside the live one; a second live one is refused.
        for turn_id in ("t-q1", "t-q2"):
            conn.execute(
                "INSERT INTO turns (turn_id, thread_id, agent, state, input_json, request_hash, "
                "created_at, updated_at) VALUES (%s, 'th', 'a', 'QUEUED', 'null', 'h', 3.0, 3.0)",
                (turn_id,),
            )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("UPDATE turns SET state = 'RUNNING' WHERE turn_id = 't-q1'")
        conn.execute("UPDATE turns SET state = 'CANCELLED' WHERE turn_id = 't-live'")
        with pytest.raises(psycopg.errors.CheckViolation):
            conn.execute("UPDATE turns SET state = 'LOST' WHERE turn_id = 't-old'")
        # Migration 2 ran on the way to 3: the audit log and the outbox's trace context.
        assert conn.execute("SELECT count(*) FROM audit").fetchone() == (0,)
        assert conn.execute(
            "SELECT 1 FROM information_schema.columns "
            "WHERE table_name = 'outbox' AND column_name = 'traceparent'"
        ).fetchone() == (1,)
        # Migrations 4 and 5: the turn horizon's index, one probation turn per agent.
        for index in ("turns_to_delete", "turns_one_probation"):
            assert conn.execute(
                "SELECT 1 FROM pg_indexes WHERE tablename = 'turns' AND indexname = %s", (index,)
            ).fetchone() == (1,), index


def test_replicas_migrating_a_new_database_at_once_do_not_deadlock(
    postgres_cluster: PostgresCluster,
) -> None:
    """Replicas started together on an empty database: one migrates, the others wait
    for it. Waiting inside `pg_advisory_lock` kept a transaction open that the
    migrator's CREATE INDEX CONCURRENTLY waited for in turn: PostgreSQL saw a deadlock
    and one replica failed to start (found by docs/two-replicas.md's test)."""
    url = postgres_cluster.new_database()
    ready = threading.Barrier(REPLICAS_AT_ONCE)

    def replica() -> int:
        with psycopg.connect(url, autocommit=True) as conn:
            ready.wait()
            return postgres_schema.migrate(conn)

    with ThreadPoolExecutor(REPLICAS_AT_ONCE) as pool:
        versions = list(pool.map(lambda _: replica(), range(REPLICAS_AT_ONCE)))
    assert versions == [len(PG_MIGRATIONS)] * REPLICAS_AT_ONCE


REPLICAS_AT_ONCE = 4


# A journal written before decision 510: turns with no effect, a live one, a
# superseded one waiting for its announcement, and one announced.
LEDGERS = {
    "t-none": [],
    "t-live": [("k1", "INTENT", 0)],
    "t-waiting": [("k1", "DONE", 0), ("k1~1", "SUPERSEDED", 0)],
    "t-announced": [("k1", "SUPERSEDED", 1)],
}
FLAGS = {"t-none": 0, "t-live": 1, "t-waiting": 3, "t-announced": 0}


def write_ledgers(execute: Callable[[str, tuple[object, ...]], object], mark: str) -> None:
    turn = (
        "INSERT INTO turns (turn_id, thread_id, agent, state, input_json, request_hash, "
        f"created_at, updated_at) VALUES ({mark}, {mark}, 'a', 'RUNNING', 'null', 'h', 1.0, 2.0)"
    )
    effect = (
        "INSERT INTO effects (turn_id, effect_key, base_key, name, args_json, policy, state, "
        "attempt, task_id, checkpoint_id, call_index, announced, created_at, updated_at) "
        f"VALUES ({mark}, {mark}, 'k1', 'send', '{{}}', 'park', {mark}, 0, 'task', 'cp', 0, "
        f"{mark}, 1.0, 1.0)"
    )
    for n, (turn_id, rows) in enumerate(LEDGERS.items()):
        execute(turn, (turn_id, f"th-{n}"))
        for key, state, announced in rows:
            execute(effect, (turn_id, key, state, announced))


def _before_effects(migrations: list[str]) -> int:
    """How many migrations come before the one that adds `turns.effects`."""
    return next(i for i, m in enumerate(migrations) if "ADD COLUMN effects" in m)


def test_a_sqlite_journal_learns_what_each_turns_ledger_holds(tmp_path: Path) -> None:
    turns_path = tmp_path / "turns.db"
    with sqlite3.connect(turns_path, isolation_level=None) as conn:
        conn.execute("BEGIN")
        migrate(conn, "main", TURNS_MIGRATIONS[: _before_effects(TURNS_MIGRATIONS)])
        write_ledgers(conn.execute, "?")
        conn.execute("COMMIT")
    db = Database(turns_path, tmp_path / "sessions.db")
    db.open()
    db.close()
    with sqlite3.connect(turns_path) as conn:
        assert dict(conn.execute("SELECT turn_id, effects FROM turns")) == FLAGS


def test_a_postgres_journal_learns_what_each_turns_ledger_holds(
    postgres_cluster: PostgresCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = postgres_cluster.new_database()
    with psycopg.connect(url, autocommit=True) as conn:
        monkeypatch.setattr(
            postgres_schema,
            "TURNKEEPER_MIGRATIONS",
            PG_MIGRATIONS[: _before_effects(PG_MIGRATIONS)],
        )
        postgres_schema.migrate(conn)
        write_ledgers(conn.execute, "%s")
        monkeypatch.setattr(postgres_schema, "TURNKEEPER_MIGRATIONS", PG_MIGRATIONS)
    db = PostgresDatabase(url)
    db.open()
    db.close()
    with psycopg.connect(url, autocommit=True) as conn:
        assert dict(conn.execute("SELECT turn_id, effects FROM turns").fetchall()) == FLAGS
