"""LangGraph checkpoints in sessions.db, in langgraph-checkpoint-sqlite's schema.

Rows are written exactly as `SqliteSaver` writes them (same columns, same
INSERT OR REPLACE / IGNORE rules), so stock SqliteSaver reads what RemoteSaver
wrote and the other way round. Metadata arrives as the client's JSON. The SQLite
backend's `CheckpointRows` (store/contract.py); the rules above the rows (fencing,
boundaries) are journal/checkpoints.py's.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from langgraph.checkpoint.sqlite.utils import search_where

from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.store.contract import Conn, Tx
from turnkeeper_server.store.records import (
    Boundary,
    CheckpointPut,
    CheckpointQuery,
    CheckpointRow,
    WriteRow,
    WritesPut,
)
from turnkeeper_server.store.rows import insert_rows

_PENDING_WRITES = (
    "SELECT task_id, channel, type, value, task_path, idx FROM sessions.writes "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata"
)


def put(tx: Tx, put: CheckpointPut, boundary: Boundary | None) -> None:
    tx.execute(
        f"INSERT OR REPLACE INTO sessions.checkpoints ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (
            put.thread_id,
            put.checkpoint_ns,
            put.checkpoint_id,
            put.parent_checkpoint_id or None,
            put.type,
            put.blob,
            put.metadata_json.encode("utf-8", "ignore"),
        ),
    )
    if boundary is not None:
        tx.execute(
            "INSERT OR REPLACE INTO sessions.turnkeeper_boundaries "
            "(turn_id, checkpoint_id, thread_id, checkpoint_ns, attempt, last_seq) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (
                boundary.turn_id,
                put.checkpoint_id,
                put.thread_id,
                put.checkpoint_ns,
                boundary.attempt,
                boundary.last_seq,
            ),
        )


def put_writes(tx: Tx, writes: WritesPut) -> None:
    verb = "INSERT OR REPLACE" if writes.replace else "INSERT OR IGNORE"
    key = (writes.thread_id, writes.checkpoint_ns, writes.checkpoint_id, writes.task_id)
    values: list[object] = []
    for idx, channel, type_, value in writes.writes:
        values += (*key, writes.task_path, idx, channel, type_, value)
    # One statement for the task's writes (store/rows.py): a later row with the same
    # key replaces (or is ignored after) an earlier one, as executemany's rows did.
    insert_rows(
        tx,
        f"{verb} INTO sessions.writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
        "task_path, idx, channel, type, value)",
        9,
        values,
    )


def delete_thread(tx: Tx, thread_id: str) -> None:
    tx.execute("DELETE FROM sessions.checkpoints WHERE thread_id = ?", (thread_id,))
    tx.execute("DELETE FROM sessions.writes WHERE thread_id = ?", (thread_id,))
    tx.execute("DELETE FROM sessions.turnkeeper_boundaries WHERE thread_id = ?", (thread_id,))


# -- the lifecycle's deletes and copies (journal/maintenance.py, journal/lifecycle.py) -----


def delete_checkpoint(tx: Tx, thread_id: str, ns: str, checkpoint_id: str) -> int:
    """One checkpoint, its writes and its boundary rows; returns 1 if it existed."""
    key = (thread_id, ns, checkpoint_id)
    where = "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
    gone = int(tx.execute(f"DELETE FROM sessions.checkpoints {where}", key).rowcount)
    tx.execute(f"DELETE FROM sessions.writes {where}", key)
    tx.execute(f"DELETE FROM sessions.turnkeeper_boundaries {where}", key)
    return gone


def namespaces(tx: Tx, thread_id: str) -> list[tuple[str, str]]:
    """(namespace, latest checkpoint id) of each namespace of the thread."""
    return [
        (r[0], r[1])
        for r in tx.execute(
            "SELECT checkpoint_ns, max(checkpoint_id) FROM sessions.checkpoints "
            "WHERE thread_id = ? GROUP BY checkpoint_ns",
            (thread_id,),
        ).fetchall()
    ]


def prune_namespace(tx: Tx, thread_id: str, ns: str, keep: str | None) -> int:
    """Delete the namespace's checkpoints older than `keep` (all when None), with
    their writes and boundaries; returns how many checkpoints went."""
    deleted = 0
    for table in ("checkpoints", "writes", "turnkeeper_boundaries"):
        sql = f"DELETE FROM sessions.{table} WHERE thread_id = ? AND checkpoint_ns = ?"
        params: tuple[str, ...] = (thread_id, ns)
        if keep is not None:
            sql += " AND checkpoint_id < ?"
            params += (keep,)
        count = int(tx.execute(sql, params).rowcount)
        if table == "checkpoints":
            deleted = count
    if keep is None:
        # Writes saved against a checkpoint that was never stored go too.
        tx.execute(
            "DELETE FROM sessions.writes WHERE thread_id = ? AND checkpoint_ns = ?",
            (thread_id, ns),
        )
    return deleted


def checkpoints_of_runs(tx: Tx, run_id: str) -> list[tuple[str, str, str]]:
    """(thread, namespace, id) of the checkpoints whose metadata names `run_id`:
    json_extract, the same filter `list_` uses."""
    return [
        (r[0], r[1], r[2])
        for r in tx.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM sessions.checkpoints "
            "WHERE json_extract(CAST(metadata AS TEXT), '$.run_id') = ?",
            (run_id,),
        ).fetchall()
    ]


def copy_thread(tx: Tx, source: str, target: str) -> int:
    """Every checkpoint and write of `source` under `target`, same ids."""
    copied = tx.execute(
        "INSERT OR REPLACE INTO sessions.checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, type, checkpoint, metadata) "
        "SELECT ?, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
        "metadata FROM sessions.checkpoints WHERE thread_id = ?",
        (target, source),
    ).rowcount
    tx.execute(
        "INSERT OR REPLACE INTO sessions.writes (thread_id, checkpoint_ns, checkpoint_id, "
        "task_id, task_path, idx, channel, type, value) "
        "SELECT ?, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, value "
        "FROM sessions.writes WHERE thread_id = ?",
        (target, source),
    )
    return int(copied)


def _writes(conn: Conn, thread_id: str, ns: str, checkpoint_id: str) -> list[WriteRow]:
    return [WriteRow(*r) for r in conn.execute(_PENDING_WRITES, (thread_id, ns, checkpoint_id))]


def _row(conn: Conn, row: tuple[Any, ...]) -> CheckpointRow:
    thread_id, ns, checkpoint_id, parent, type_, blob, metadata = row
    return CheckpointRow(
        thread_id,
        ns,
        checkpoint_id,
        parent,
        type_,
        blob,
        metadata,
        writes=_writes(conn, thread_id, ns, checkpoint_id),
    )


def get(conn: Conn, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> CheckpointRow | None:
    if checkpoint_id:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM sessions.checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
            (thread_id, checkpoint_ns, checkpoint_id),
        ).fetchone()
    else:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM sessions.checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id, checkpoint_ns),
        ).fetchone()
    if row is None:
        return None
    return _row(conn, row)


def list_(conn: Conn, query: CheckpointQuery) -> Iterator[CheckpointRow]:
    config: dict[str, Any] | None = None
    if query.thread_id:
        configurable: dict[str, Any] = {"thread_id": query.thread_id}
        if query.checkpoint_ns is not None:
            configurable["checkpoint_ns"] = query.checkpoint_ns
        if query.checkpoint_id:
            configurable["checkpoint_id"] = query.checkpoint_id
        config = {"configurable": configurable}
    filter_: dict[str, Any] | None = None
    if query.filter_json:
        try:
            filter_ = json.loads(query.filter_json)
        except ValueError as exc:
            raise InvalidArgument(f"filter_json is not valid JSON: {exc}") from None
        if not isinstance(filter_, dict):
            raise InvalidArgument("filter_json must be a JSON object")
    before = (
        {"configurable": {"checkpoint_id": query.before_checkpoint_id}}
        if query.before_checkpoint_id
        else None
    )
    try:
        # SqliteSaver's own WHERE builder: the same filter semantics, and its
        # key validation keeps metadata keys out of the SQL text.
        where, params = search_where(config, filter_, before)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InvalidArgument(str(exc)) from None
    sql = f"SELECT {_COLUMNS} FROM sessions.checkpoints {where} ORDER BY checkpoint_id DESC"
    if query.limit > 0:
        sql += " LIMIT ?"
        params = (*params, query.limit)
    for row in conn.execute(sql, params).fetchall():
        yield _row(conn, row)
