"""Schema migration 2 on a turns.db written by the previous release: the turns keep
their rows and rowids (ListTurns' page tokens), and the new states are storable."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from turnkeeper_server.store.sqlite import Database
from turnkeeper_server.store.sqlite_schema import TURNS_MIGRATIONS, migrate


def test_a_version_1_journal_is_rebuilt_with_its_rows(tmp_path: Path) -> None:
    turns_path = tmp_path / "turns.db"
    with sqlite3.connect(turns_path, isolation_level=None) as conn:
        conn.execute("BEGIN")
        migrate(conn, "main", TURNS_MIGRATIONS[:1])
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
        assert {"turns_one_live_per_thread", "turns_queued", "turns_to_prune"} <= indexes
