"""What a service's store holds, read straight from its tables on either backend:
the rows of one thread, table by table, and a fresh dump of everything (to look
for a value that must be gone). Read apart from the service, as an auditor would."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import psycopg
from pgserver import _commands
from turnkeeper_server.config import Settings

REWIND_SUBJECT = "vystak.turn.rewind"


def _events_subjects(turn_ids: list[str]) -> list[str]:
    return [f"vystak.turn.events.{t}" for t in turn_ids]


def _rewinds_of(payloads: list[Any], thread_id: str) -> int:
    return sum(1 for p in payloads if json.loads(bytes(p))["thread_id"] == thread_id)


def thread_rows(settings: Settings, thread_id: str, turn_ids: list[str]) -> dict[str, int]:
    """Rows that belong to the thread, per table of the backend's store."""
    if settings.database_url:
        return _pg_rows(settings.database_url, thread_id, turn_ids)
    return _sqlite_rows(settings.turns_path, settings.sessions_path, thread_id, turn_ids)


def _sqlite_rows(
    turns_path: Path, sessions_path: Path, thread_id: str, turn_ids: list[str]
) -> dict[str, int]:
    marks = ", ".join("?" for _ in turn_ids)
    with sqlite3.connect(turns_path) as db:
        db.execute("ATTACH DATABASE ? AS sessions", (str(sessions_path),))

        def count(sql: str, params: Any) -> int:
            return int(db.execute(sql, params).fetchone()[0])

        payloads = [
            r[0]
            for r in db.execute("SELECT payload FROM outbox WHERE subject = ?", (REWIND_SUBJECT,))
        ]
        return {
            "turns": count("SELECT count(*) FROM turns WHERE thread_id = ?", (thread_id,)),
            "events": count(f"SELECT count(*) FROM events WHERE turn_id IN ({marks})", turn_ids),
            "effects": count(f"SELECT count(*) FROM effects WHERE turn_id IN ({marks})", turn_ids),
            "outbox (events)": count(
                f"SELECT count(*) FROM outbox WHERE subject IN ({marks})",
                _events_subjects(turn_ids),
            ),
            "outbox (rewinds)": _rewinds_of(payloads, thread_id),
            "checkpoints": count(
                "SELECT count(*) FROM sessions.checkpoints WHERE thread_id = ?", (thread_id,)
            ),
            "writes": count(
                "SELECT count(*) FROM sessions.writes WHERE thread_id = ?", (thread_id,)
            ),
            "boundaries": count(
                "SELECT count(*) FROM sessions.turnkeeper_boundaries WHERE thread_id = ?",
                (thread_id,),
            ),
        }


def _pg_rows(url: str, thread_id: str, turn_ids: list[str]) -> dict[str, int]:
    with psycopg.connect(url) as db:

        def count(sql: str, params: Any) -> int:
            row = db.execute(sql, params).fetchone()
            assert row is not None
            return int(row[0])

        payloads = [
            r[0]
            for r in db.execute("SELECT payload FROM outbox WHERE subject = %s", (REWIND_SUBJECT,))
        ]
        by_thread = "SELECT count(*) FROM {} WHERE thread_id = %s"
        return {
            "turns": count(by_thread.format("turns"), (thread_id,)),
            "events": count("SELECT count(*) FROM events WHERE turn_id = ANY(%s)", (turn_ids,)),
            "effects": count("SELECT count(*) FROM effects WHERE turn_id = ANY(%s)", (turn_ids,)),
            "outbox (events)": count(
                "SELECT count(*) FROM outbox WHERE subject = ANY(%s)", (_events_subjects(turn_ids),)
            ),
            "outbox (rewinds)": _rewinds_of(payloads, thread_id),
            # PostgresSaver's three tables, and the boundaries beside them.
            "checkpoints": count(by_thread.format("checkpoints"), (thread_id,)),
            "checkpoint_blobs": count(by_thread.format("checkpoint_blobs"), (thread_id,)),
            "checkpoint_writes": count(by_thread.format("checkpoint_writes"), (thread_id,)),
            "boundaries": count(by_thread.format("turnkeeper_boundaries"), (thread_id,)),
        }


def sqlite_dump(path: Path, without: tuple[str, ...] = ()) -> str:
    """A fresh `sqlite3 .dump` of a file, by the sqlite3 command-line shell; the rows
    of the tables in `without` left out."""
    text = subprocess.run(
        ["sqlite3", str(path), ".dump"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    skipped = tuple(f"INSERT INTO {table} " for table in without)
    return "".join(line for line in text.splitlines(True) if not line.startswith(skipped))


def pg_dump(url: str, without: tuple[str, ...] = ()) -> str:
    """A fresh `pg_dump --data-only` of a database, by the pg_dump of the pgserver wheel;
    the rows of the tables in `without` left out."""
    binary = Path(_commands.POSTGRES_BIN_PATH) / "pg_dump"
    excluded = [f"--exclude-table-data={table}" for table in without]
    return subprocess.run(
        [str(binary), "--data-only", *excluded, "--dbname", url],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout


def store_text(settings: Settings, without: tuple[str, ...] = ()) -> dict[str, str]:
    """Every row of the store, as text: a fresh `sqlite3 .dump` of each SQLite file,
    or a fresh `pg_dump --data-only` of the PostgreSQL database (BYTEA as hex); the
    rows of the tables in `without` left out."""
    if settings.database_url:
        return {"database": pg_dump(settings.database_url, without)}
    return {
        name: sqlite_dump(path, without)
        for name, path in (
            ("turns.db", settings.turns_path),
            ("sessions.db", settings.sessions_path),
        )
    }
