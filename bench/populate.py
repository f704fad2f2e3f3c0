"""Fill turns.db and sessions.db directly, fast, before the service opens them.

The schema comes from the service's own migrations (`Database.open`), and rows are
inserted as the journal writes them, so the service reads them as its own. Filling
is setup, not measurement: it runs with `synchronous=OFF` and one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from turnkeeper_server.journal.start import request_hash
from turnkeeper_server.store.sqlite import Database

# A token event as a streaming model emits it (about 100 bytes of JSON).
EVENT_TYPE = "token"
EVENT_DATA = json.dumps({"delta": "the quick brown fox jumps over the lazy dog " * 2})


def paths(data_dir: Path) -> tuple[Path, Path]:
    return data_dir / "turns.db", data_dir / "sessions.db"


def create_schema(data_dir: Path) -> None:
    turns, sessions = paths(data_dir)
    db = Database(turns, sessions)
    db.open()
    db.close()


def connect(data_dir: Path, synchronous: str = "OFF") -> sqlite3.Connection:
    turns, sessions = paths(data_dir)
    conn = sqlite3.connect(turns, isolation_level=None)
    conn.execute("ATTACH DATABASE ? AS sessions", (str(sessions),))
    for schema in ("main", "sessions"):
        conn.execute(f"PRAGMA {schema}.journal_mode=WAL")
        conn.execute(f"PRAGMA {schema}.synchronous={synchronous}")
    return conn


@dataclass(frozen=True)
class TurnSpec:
    """What `fill` writes for each of `count` turns."""

    count: int
    prefix: str = "t"
    agent: str = "bench"
    state: str = "DONE"
    # Owner of RUNNING turns; None: unowned.
    replica: str | None = None
    incarnation: str | None = None
    events_per_turn: int = 0
    # Seq recorded as the boundary of one root checkpoint per turn; 0: none.
    boundary_seq: int = 0


def turn_id(spec: TurnSpec, i: int) -> str:
    return f"{spec.prefix}{i:07d}"


def fill(data_dir: Path, spec: TurnSpec, chunk: int = 50_000) -> None:
    create_schema(data_dir)
    now = time.time()
    conn = connect(data_dir)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO main.turns (turn_id, thread_id, agent, state, attempts, last_seq, "
            "input_json, request_hash, owner_replica, owner_incarnation, lease_expires_at, "
            "created_at, updated_at) VALUES (?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
            _turn_rows(spec, now),
        )
        batch: list[tuple[str, int, int, str, str, float]] = []
        for row in _event_rows(spec, now):
            batch.append(row)
            if len(batch) >= chunk:
                _insert_events(conn, batch)
                batch = []
        _insert_events(conn, batch)
        if spec.boundary_seq:
            conn.executemany(
                "INSERT INTO sessions.turnkeeper_boundaries (turn_id, checkpoint_id, thread_id, "
                "checkpoint_ns, attempt, last_seq) VALUES (?, ?, ?, '', 0, ?)",
                (
                    (turn_id(spec, i), f"cp-{i:07d}", f"th-{turn_id(spec, i)}", spec.boundary_seq)
                    for i in range(spec.count)
                ),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def _turn_rows(spec: TurnSpec, now: float) -> Iterator[tuple[object, ...]]:
    owned = spec.replica is not None
    for i in range(spec.count):
        tid = turn_id(spec, i)
        thread = f"th-{tid}"
        input_json = json.dumps({"q": f"question {i}"}, separators=(",", ":"))
        yield (
            tid,
            thread,
            spec.agent,
            spec.state,
            spec.events_per_turn,
            input_json,
            request_hash(thread, spec.agent, input_json),
            spec.replica,
            spec.incarnation if owned else None,
            # Far ahead: the lease reaper must leave these turns to the benchmark.
            now + 86_400 if spec.state == "RUNNING" else None,
            now - spec.count + i,
            now,
        )


def _event_rows(spec: TurnSpec, now: float) -> Iterator[tuple[str, int, int, str, str, float]]:
    for i in range(spec.count):
        tid = turn_id(spec, i)
        for seq in range(1, spec.events_per_turn + 1):
            yield (tid, seq, 0, EVENT_TYPE, EVENT_DATA, now)


def _insert_events(
    conn: sqlite3.Connection, rows: list[tuple[str, int, int, str, str, float]]
) -> None:
    if rows:
        conn.executemany(
            "INSERT INTO main.events (turn_id, seq, attempt, type, data_json, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            rows,
        )
