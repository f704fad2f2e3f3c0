"""Threads as the LangGraph API knows them: a thread id with metadata, made before or
without any turn on it (`threads.create`), found, searched, its metadata merged.

A thread needs no row to exist for the rest of the service: turns and checkpoints
name their thread, and a thread that only they name is still a thread here (its
first turn's time is its creation). The row holds what only the API gives it: the
metadata, and a thread created with nothing run on it yet. Erasing a thread
(journal/erasure.py) deletes its row with the rest. The SQL is plain: PostgreSQL
accepts it too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from turnkeeper_server.errors import AlreadyExists
from turnkeeper_server.store.contract import Conn, Tx


@dataclass(frozen=True)
class ThreadRecord:
    thread_id: str
    metadata: dict[str, Any]
    created_at: float
    updated_at: float
    # Who made it (auth.identity of its creator); '' for a thread made before owners
    # were recorded, without tokens, or named only by its turns.
    owner: str = ""


_COLUMNS = "thread_id, metadata, created_at, updated_at, owner"
# Rows read at a time by a search that filters on metadata.
_CHUNK = 500
# A thread's row, inserted only when the thread has neither a row nor a turn.
_MAKE = (
    f"INSERT INTO main.threads ({_COLUMNS}) SELECT ?, ?, ?, ?, ? "
    "WHERE NOT EXISTS (SELECT 1 FROM main.turns WHERE thread_id = ?) "
    "ON CONFLICT (thread_id) DO NOTHING"
)


def _record(row: Any) -> ThreadRecord:
    metadata = json.loads(row[1]) if row[1] else {}
    return ThreadRecord(
        row[0], metadata if isinstance(metadata, dict) else {}, row[2], row[3], row[4]
    )


def get(conn: Conn, thread_id: str) -> ThreadRecord | None:
    """The thread's row, or a record made from its turns; None: no such thread."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM main.threads WHERE thread_id = ?", (thread_id,)
    ).fetchone()
    if row is not None:
        return _record(row)
    found = conn.execute(
        "SELECT min(created_at), max(updated_at) FROM main.turns WHERE thread_id = ?",
        (thread_id,),
    ).fetchone()
    if found is None or found[0] is None:
        return None
    return ThreadRecord(thread_id, {}, found[0], found[1])


def create(
    tx: Tx,
    thread_id: str,
    metadata: dict[str, Any],
    now: float,
    *,
    if_exists: str,
    owner: str = "",
) -> ThreadRecord:
    """A new thread row. `if_exists`: "raise" (ALREADY_EXISTS) or "do_nothing" (the
    thread as it is). A thread its turns already name gets its row now."""
    existing = get(tx.conn, thread_id)
    if existing is not None:
        if if_exists != "do_nothing":
            raise AlreadyExists(
                f"thread {thread_id!r} exists; pass if_exists='do_nothing' to get it instead"
            )
        return existing
    return _insert(tx, thread_id, metadata, now, owner)


def _insert(
    tx: Tx, thread_id: str, metadata: dict[str, Any], now: float, owner: str
) -> ThreadRecord:
    tx.execute(
        f"INSERT INTO main.threads ({_COLUMNS}) VALUES (?, ?, ?, ?, ?)",
        (thread_id, json.dumps(metadata), now, now, owner),
    )
    return ThreadRecord(thread_id, metadata, now, now, owner)


def ensure(
    tx: Tx, thread_id: str, metadata: dict[str, Any], now: float, owner: str = ""
) -> ThreadRecord:
    """The thread, made if it does not exist yet (a run with if_not_exists=create)."""
    return create(tx, thread_id, metadata, now, if_exists="do_nothing", owner=owner)


def ensure_made(
    tx: Tx, thread_id: str, metadata: dict[str, Any], now: float, owner: str = ""
) -> tuple[ThreadRecord, bool]:
    """As ensure, and whether this transaction's insert made the thread: True only
    when it had neither a row nor a turn (of two racing, only the one whose insert
    commits; the other's insert waits for it, does nothing, and reads its row)."""
    made = make(tx, thread_id, metadata, now, owner)
    if made is not None:
        return made, True
    existing = get(tx.conn, thread_id)
    if existing is None:  # erased since the insert looked
        return _insert(tx, thread_id, metadata, now, owner), True
    return existing, False


def make(
    tx: Tx, thread_id: str, metadata: dict[str, Any], now: float, owner: str = ""
) -> ThreadRecord | None:
    """The thread's row, inserted only when the thread has neither a row nor a turn;
    None when it has either (nothing written). One statement, so on PostgreSQL one
    wait mid-group where a read and an insert were two (decision 581)."""
    row = tx.execute(
        _MAKE + " RETURNING thread_id",
        (thread_id, json.dumps(metadata), now, now, owner, thread_id),
    ).fetchone()
    return None if row is None else ThreadRecord(thread_id, metadata, now, now, owner)


def ensure_unread(tx: Tx, thread_id: str, metadata: dict[str, Any], now: float, owner: str) -> None:
    """As ensure, for a caller that needs no answer: one statement, nothing read
    back (on PostgreSQL no wait mid-group, decision 582)."""
    tx.execute(_MAKE, (thread_id, json.dumps(metadata), now, now, owner, thread_id))


def update_metadata(
    tx: Tx, thread_id: str, metadata: dict[str, Any], now: float
) -> ThreadRecord | None:
    """Merge `metadata` into the thread's (LangGraph's rule: keys given replace,
    others stay); None: no such thread."""
    existing = get(tx.conn, thread_id)
    if existing is None:
        return None
    merged = {**existing.metadata, **metadata}
    tx.execute(
        "INSERT INTO main.threads (thread_id, metadata, created_at, updated_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (thread_id) DO UPDATE SET metadata = excluded.metadata, "
        "updated_at = excluded.updated_at",
        (thread_id, json.dumps(merged), existing.created_at, now),
    )
    return ThreadRecord(thread_id, merged, existing.created_at, now, existing.owner)


def touch(tx: Tx, thread_id: str, now: float) -> None:
    tx.execute("UPDATE main.threads SET updated_at = ? WHERE thread_id = ?", (now, thread_id))


def search(
    conn: Conn,
    *,
    metadata: dict[str, Any],
    ids: list[str] | None,
    limit: int,
    offset: int,
    owner: str | None = None,
) -> list[ThreadRecord]:
    """Threads with a row whose metadata holds every key of `metadata` with its value,
    newest first (updated_at); `ids` narrows to those threads. Without a metadata
    filter the page is the database's (LIMIT/OFFSET); with one, rows are read a
    chunk at a time and matched here (metadata is JSON text on both backends).
    `owner`: only the threads that identity made."""
    clauses: list[str] = []
    params: list[Any] = []
    if ids is not None:
        if not ids:
            return []
        clauses.append(f"thread_id IN ({', '.join('?' for _ in ids)})")
        params += ids
    if owner is not None:
        clauses.append("owner = ?")
        params.append(owner)
    where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
    order = f"SELECT {_COLUMNS} FROM main.threads{where} ORDER BY updated_at DESC, thread_id"
    if not metadata:
        rows = conn.execute(f"{order} LIMIT ? OFFSET ?", (*params, limit, offset)).fetchall()
        return [_record(r) for r in rows]
    out: list[ThreadRecord] = []
    skipped, start = 0, 0
    while len(out) < limit:
        rows = conn.execute(f"{order} LIMIT ? OFFSET ?", (*params, _CHUNK, start)).fetchall()
        for row in rows:
            record = _record(row)
            if not all(record.metadata.get(k) == v for k, v in metadata.items()):
                continue
            if skipped < offset:
                skipped += 1
                continue
            out.append(record)
            if len(out) == limit:
                break
        if len(rows) < _CHUNK:
            break
        start += _CHUNK
    return out


def delete(tx: Tx, thread_id: str) -> int:
    return int(
        tx.execute("DELETE FROM main.threads WHERE thread_id = ?", (thread_id,)).rowcount or 0
    )
