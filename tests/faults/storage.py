"""What the invariants read from the service's store, on either backend: the outbox,
the checkpoints and writes that were acknowledged, a turn's boundaries, and (SQLite)
the files' integrity. Read-only, beside the running service."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Protocol

import psycopg


def integrity(path: Path) -> str:
    """``PRAGMA integrity_check`` through a read-only connection (the service may
    be running: WAL lets this read a consistent snapshot without writing)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return "; ".join(str(row[0]) for row in conn.execute("PRAGMA integrity_check"))
    finally:
        conn.close()


# A turn's boundary: (checkpoint id, attempt, the checkpoint's metadata or None when
# its row is missing).
Boundary = tuple[str, int, dict[str, Any] | None]


class Storage(Protocol):
    def outbox(self) -> tuple[int, int]:
        """(rows waiting, highest id ever given)."""
        ...

    def integrity(self) -> list[tuple[bool, str]]:
        """(sound, what was found) per structural check of the store."""
        ...

    def checkpoint_exists(self, thread: str, checkpoint_id: str) -> bool: ...

    def writes_exist(self, thread: str, checkpoint_id: str, task_id: str) -> bool: ...

    def boundaries(self, turn_id: str) -> list[Boundary]: ...

    def close(self) -> None: ...


class SqliteStorage:
    def __init__(self, turns_db: Path, sessions_db: Path) -> None:
        self.turns_db = turns_db
        self.sessions_db = sessions_db
        self._sessions: sqlite3.Connection | None = None

    def _s(self) -> sqlite3.Connection:
        if self._sessions is None:
            self._sessions = sqlite3.connect(f"file:{self.sessions_db}?mode=ro", uri=True)
        return self._sessions

    def outbox(self) -> tuple[int, int]:
        conn = sqlite3.connect(f"file:{self.turns_db}?mode=ro", uri=True)
        try:
            waiting = conn.execute("SELECT count(*) FROM outbox").fetchone()[0]
            row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'outbox'").fetchone()
            return int(waiting), int(row[0]) if row else 0
        finally:
            conn.close()

    def integrity(self) -> list[tuple[bool, str]]:
        found = [(path.name, integrity(path)) for path in (self.turns_db, self.sessions_db)]
        return [
            (result == "ok", f"{name}: integrity_check says {result}") for name, result in found
        ]

    def checkpoint_exists(self, thread: str, checkpoint_id: str) -> bool:
        row = (
            self._s()
            .execute(
                "SELECT 1 FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
                "AND checkpoint_id = ?",
                (thread, checkpoint_id),
            )
            .fetchone()
        )
        return row is not None

    def writes_exist(self, thread: str, checkpoint_id: str, task_id: str) -> bool:
        row = (
            self._s()
            .execute(
                "SELECT 1 FROM writes WHERE thread_id = ? AND checkpoint_ns = '' "
                "AND checkpoint_id = ? AND task_id = ?",
                (thread, checkpoint_id, task_id),
            )
            .fetchone()
        )
        return row is not None

    def boundaries(self, turn_id: str) -> list[Boundary]:
        rows = (
            self._s()
            .execute(
                "SELECT b.checkpoint_id, b.attempt, c.metadata FROM turnkeeper_boundaries b "
                "LEFT JOIN checkpoints c ON c.thread_id = b.thread_id "
                "AND c.checkpoint_ns = b.checkpoint_ns AND c.checkpoint_id = b.checkpoint_id "
                "WHERE b.turn_id = ? AND b.checkpoint_ns = ''",
                (turn_id,),
            )
            .fetchall()
        )
        return [(str(c), int(a), None if m is None else json.loads(m)) for c, a, m in rows]

    def close(self) -> None:
        if self._sessions is not None:
            self._sessions.close()
            self._sessions = None


class PostgresStorage:
    """The one database every replica serves; langgraph-checkpoint-postgres's tables
    hold the checkpoints (``checkpoints``, ``checkpoint_writes``)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def _one(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        with psycopg.connect(self.url, autocommit=True) as conn:
            return conn.execute(sql, args).fetchone()

    def outbox(self) -> tuple[int, int]:
        waiting = self._one("SELECT count(*) FROM outbox")[0]
        # The identity's sequence: its last value, or none given yet.
        last = self._one(
            "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM outbox_id_seq"
        )[0]
        return int(waiting), int(last)

    def integrity(self) -> list[tuple[bool, str]]:
        # PostgreSQL's WAL recovery is its own business; no file to check here.
        return []

    def checkpoint_exists(self, thread: str, checkpoint_id: str) -> bool:
        row = self._one(
            "SELECT 1 FROM checkpoints WHERE thread_id = %s AND checkpoint_ns = '' "
            "AND checkpoint_id = %s",
            (thread, checkpoint_id),
        )
        return row is not None

    def writes_exist(self, thread: str, checkpoint_id: str, task_id: str) -> bool:
        row = self._one(
            "SELECT 1 FROM checkpoint_writes WHERE thread_id = %s AND checkpoint_ns = '' "
            "AND checkpoint_id = %s AND task_id = %s",
            (thread, checkpoint_id, task_id),
        )
        return row is not None

    def boundaries(self, turn_id: str) -> list[Boundary]:
        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT b.checkpoint_id, b.attempt, c.metadata FROM turnkeeper_boundaries b "
                "LEFT JOIN checkpoints c ON c.thread_id = b.thread_id "
                "AND c.checkpoint_ns = b.checkpoint_ns AND c.checkpoint_id = b.checkpoint_id "
                "WHERE b.turn_id = %s AND b.checkpoint_ns = ''",
                (turn_id,),
            ).fetchall()
        return [(str(c), int(a), m) for c, a, m in rows]

    def close(self) -> None:
        pass
