"""LangGraph checkpoints on PostgreSQL, in langgraph-checkpoint-postgres's tables.

PostgresSaver keeps a checkpoint as JSONB with its primitive channel values
inline, and every other channel value as a row of `checkpoint_blobs` keyed by
(channel, version), each serialised on its own. RemoteSaver sends one typed blob
for the whole checkpoint (what SqliteSaver stores). So the service splits it
here: it reads the msgpack *structure* of the checkpoint (maps, lists, strings,
numbers) and re-encodes each non-primitive channel value on its own, exactly as
PostgresSaver's serializer would have; msgpack extension values (application
objects: messages, dataclasses, UUIDs) stay opaque bytes, never deserialised.
Reading puts the pieces back into one msgpack blob. Re-encoding an unchanged
tree gives the same bytes, so what RemoteSaver put is what it gets.

A checkpoint that cannot be split without decoding it (serialised with pickle or
an encrypting serde, or not a msgpack map) is kept whole, as one blob of a
reserved channel: the service serves it back as it came, and PostgresSaver sees
that single channel instead of the graph's (decision 64).

The PostgreSQL backend's `CheckpointRows` (store/contract.py); the rules above the
rows (fencing, boundaries) are journal/checkpoints.py's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from functools import cache
from typing import Any

import ormsgpack

from turnkeeper_server.errors import InvalidArgument, WrongState
from turnkeeper_server.store.contract import Conn, Tx
from turnkeeper_server.store.records import (
    Boundary,
    CheckpointPut,
    CheckpointQuery,
    CheckpointRow,
    WriteRow,
    WritesPut,
)
from turnkeeper_server.store.rows import MAX_ROWS, insert_rows

_OPTS = ormsgpack.OPT_NON_STR_KEYS
# The channel holding a checkpoint kept whole, and the marker in its JSONB document.
OPAQUE_CHANNEL = "__turnkeeper_checkpoint__"
OPAQUE_MARK = "turnkeeper_opaque"
# SqliteSaver's rule for metadata filter keys, so a filter means the same on both backends.
_FILTER_KEY = re.compile(r"^[a-zA-Z0-9_.-]+$")
_PRIMITIVES = (str, int, float, bool, type(None))

_COLUMNS = "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata"
_PENDING_WRITES = (
    "SELECT task_id, channel, type, blob, task_path, idx FROM checkpoint_writes "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ? "
    "ORDER BY task_path, task_id, idx"
)
_BLOBS = (
    "SELECT bl.channel, bl.type, bl.blob FROM jsonb_each_text(?::jsonb) AS v "
    "JOIN checkpoint_blobs bl ON bl.thread_id = ? AND bl.checkpoint_ns = ? "
    "AND bl.channel = v.key AND bl.version = v.value"
)


def _opaque(code: int, data: bytes) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, data)


def split(
    checkpoint_id: str, type_: str, blob: bytes
) -> tuple[dict[str, Any], list[tuple[str, str, str, bytes | None]]]:
    """A RemoteSaver checkpoint blob as PostgresSaver stores it: the checkpoint for
    the JSONB column, and (channel, version, type, blob) rows for checkpoint_blobs."""
    tree: Any = None
    if type_ == "msgpack":
        try:
            tree = ormsgpack.unpackb(blob, ext_hook=_opaque, option=_OPTS)
        except ormsgpack.MsgpackDecodeError:
            tree = None
    values = tree.get("channel_values") if isinstance(tree, dict) else None
    versions = tree.get("channel_versions") if isinstance(tree, dict) else None
    if not isinstance(values, dict) or not isinstance(versions, dict):
        return _whole(checkpoint_id, type_, blob)
    inline: dict[str, Any] = {}
    blobs: list[tuple[str, str, str, bytes | None]] = []
    for channel, value in values.items():
        if isinstance(value, _PRIMITIVES):
            inline[channel] = value
            continue
        version = versions.get(channel)
        if version is None:
            return _whole(checkpoint_id, type_, blob)
        if isinstance(value, bytes):
            blobs.append((channel, str(version), "bytes", value))
        else:
            packed = ormsgpack.packb(value, option=_OPTS)
            blobs.append((channel, str(version), "msgpack", packed))
    # A channel with a version and no value: PostgresSaver's "empty" marker.
    for channel, version in versions.items():
        if channel not in values:
            blobs.append((str(channel), str(version), "empty", None))
    document = {**tree, "channel_values": inline}
    try:
        json.dumps(document, allow_nan=False)
    except (TypeError, ValueError):
        # Not JSON outside the channel values (bytes, an extension type, NaN).
        return _whole(checkpoint_id, type_, blob)
    return document, blobs


def _whole(
    checkpoint_id: str, type_: str, blob: bytes
) -> tuple[dict[str, Any], list[tuple[str, str, str, bytes | None]]]:
    document = {
        "v": 4,
        "id": checkpoint_id,
        "ts": "",
        "channel_values": {},
        "channel_versions": {OPAQUE_CHANNEL: checkpoint_id},
        "versions_seen": {},
        OPAQUE_MARK: True,
    }
    return document, [(OPAQUE_CHANNEL, checkpoint_id, type_, blob)]


def join(
    document: dict[str, Any], blobs: Sequence[tuple[str, str, bytes | None]]
) -> tuple[str, bytes]:
    """The inverse of `split`: the whole checkpoint as one typed blob."""
    if document.get(OPAQUE_MARK):
        for channel, type_, blob in blobs:
            if channel == OPAQUE_CHANNEL:
                return type_, blob or b""
        raise WrongState("the checkpoint's blob is missing from checkpoint_blobs")
    values: dict[str, Any] = dict(document.get("channel_values") or {})
    for channel, type_, blob in blobs:
        if type_ == "empty":
            continue
        if type_ == "null":
            values[channel] = None
        elif type_ in ("bytes", "bytearray"):
            values[channel] = blob or b""
        elif type_ == "msgpack":
            values[channel] = ormsgpack.unpackb(blob or b"\xc0", ext_hook=_opaque, option=_OPTS)
        else:
            raise WrongState(
                f"channel {channel!r} of this checkpoint was stored as {type_!r} (by a "
                "PostgresSaver with another serializer); the service cannot serve it"
            )
    return "msgpack", ormsgpack.packb({**document, "channel_values": values}, option=_OPTS)


_BLOBS_HEAD = (
    "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob)"
)
_BLOBS_TAIL = "ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO NOTHING"
_BOUNDARY = (
    "INSERT INTO turnkeeper_boundaries "
    "(turn_id, checkpoint_id, thread_id, checkpoint_ns, attempt, last_seq) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (turn_id, checkpoint_ns, checkpoint_id) "
    "DO UPDATE SET attempt = EXCLUDED.attempt, last_seq = EXCLUDED.last_seq"
)
_CHECKPOINT = (
    "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
    "parent_checkpoint_id, checkpoint, metadata) VALUES (?, ?, ?, ?, ?::jsonb, ?::jsonb) "
    "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) "
    "DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata"
)


def put(tx: Tx, put: CheckpointPut, boundary: Boundary | None) -> None:
    """One statement: the blob rows and the boundary ride on the checkpoint's INSERT
    as data-modifying WITH clauses (three tables, no row written twice), so a put
    is one statement for the writer's pipeline, not three (decision 267)."""
    thread_id, checkpoint_ns, checkpoint_id = put.thread_id, put.checkpoint_ns, put.checkpoint_id
    document, blobs = split(checkpoint_id, put.type, put.blob)
    clauses: list[str] = []
    params: list[Any] = []
    blob_values = [value for row in blobs for value in (thread_id, checkpoint_ns, *row)]
    if len(blobs) > MAX_ROWS:
        # More parameters than one statement should carry: the rows on their own.
        insert_rows(tx, _BLOBS_HEAD, 6, blob_values, _BLOBS_TAIL)
    elif blobs:
        clauses.append(f"blobs AS ({_blobs(len(blobs))})")
        params += blob_values
    if boundary is not None:
        clauses.append(f"boundary AS ({_BOUNDARY})")
        params += (
            boundary.turn_id,
            checkpoint_id,
            thread_id,
            checkpoint_ns,
            boundary.attempt,
            boundary.last_seq,
        )
    # JSONB refuses what JSON text allows ("\u0000" in a string): the writer
    # answers that refusal as INVALID_ARGUMENT (store/postgres.py's `_refusal`).
    params += (
        thread_id,
        checkpoint_ns,
        checkpoint_id,
        put.parent_checkpoint_id or None,
        json.dumps(document),
        put.metadata_json,
    )
    with_ = f"WITH {', '.join(clauses)} " if clauses else ""
    tx.send(with_ + _CHECKPOINT, params)


@cache
def _blobs(rows: int) -> str:
    return f"{_BLOBS_HEAD} VALUES {', '.join(['(?, ?, ?, ?, ?, ?)'] * rows)} {_BLOBS_TAIL}"


def put_writes(tx: Tx, writes: WritesPut) -> None:
    # PostgresSaver's two statements: special channels replace, others keep the first.
    on_conflict = (
        "DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob"
        if writes.replace
        else "DO NOTHING"
    )
    # One row per index, as the row-by-row inserts left it (one statement may not
    # update a row twice): the last where writes replace, else the first.
    rows: dict[int, tuple[int, str, str, bytes | None]] = {}
    for row in writes.writes:
        if writes.replace or row[0] not in rows:
            rows[row[0]] = row
    key = (
        writes.thread_id,
        writes.checkpoint_ns,
        writes.checkpoint_id,
        writes.task_id,
        writes.task_path,
    )
    insert_rows(
        tx,
        "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
        "task_path, idx, channel, type, blob)",
        9,
        [value for row in rows.values() for value in (*key, *row)],
        f"ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) {on_conflict}",
    )


def delete_thread(tx: Tx, thread_id: str) -> None:
    for table in ("checkpoints", "checkpoint_blobs", "checkpoint_writes", "turnkeeper_boundaries"):
        tx.execute(f"DELETE FROM {table} WHERE thread_id = ?", (thread_id,))


# -- the lifecycle's deletes and copies (journal/maintenance.py, journal/lifecycle.py) --

# A channel value's blob is shared by every checkpoint whose channel_versions name
# its version; once none does, it goes (PostgresSaver never deletes it alone).
_ORPHAN_BLOBS = (
    "DELETE FROM checkpoint_blobs b WHERE b.thread_id = ? AND b.checkpoint_ns = ? "
    "AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = b.thread_id "
    "AND c.checkpoint_ns = b.checkpoint_ns "
    "AND c.checkpoint -> 'channel_versions' ->> b.channel = b.version)"
)


def delete_checkpoint(tx: Tx, thread_id: str, ns: str, checkpoint_id: str) -> int:
    """One checkpoint, its writes, its boundary rows and the blobs only it used."""
    key = (thread_id, ns, checkpoint_id)
    where = "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
    gone = int(tx.execute(f"DELETE FROM checkpoints {where}", key).rowcount)
    tx.execute(f"DELETE FROM checkpoint_writes {where}", key)
    tx.execute(f"DELETE FROM turnkeeper_boundaries {where}", key)
    tx.execute(_ORPHAN_BLOBS, (thread_id, ns))
    return gone


def namespaces(tx: Tx, thread_id: str) -> list[tuple[str, str]]:
    """(namespace, latest checkpoint id) of each namespace of the thread."""
    return [
        (r[0], r[1])
        for r in tx.execute(
            "SELECT checkpoint_ns, max(checkpoint_id) FROM checkpoints "
            "WHERE thread_id = ? GROUP BY checkpoint_ns",
            (thread_id,),
        ).fetchall()
    ]


def prune_namespace(tx: Tx, thread_id: str, ns: str, keep: str | None) -> int:
    """Delete the namespace's checkpoints older than `keep` (all when None), with
    their writes, boundaries and the blobs no remaining checkpoint uses."""
    deleted = 0
    for table in ("checkpoints", "checkpoint_writes", "turnkeeper_boundaries"):
        sql = f"DELETE FROM {table} WHERE thread_id = ? AND checkpoint_ns = ?"
        params: tuple[str, ...] = (thread_id, ns)
        if keep is not None:
            sql += " AND checkpoint_id < ?"
            params += (keep,)
        count = int(tx.execute(sql, params).rowcount)
        if table == "checkpoints":
            deleted = count
    tx.execute(_ORPHAN_BLOBS, (thread_id, ns))
    return deleted


def checkpoints_of_runs(tx: Tx, run_id: str) -> list[tuple[str, str, str]]:
    """(thread, namespace, id) of the checkpoints whose metadata names `run_id`:
    the JSONB operator, as PostgresSaver's own delete_for_runs reads it."""
    return [
        (r[0], r[1], r[2])
        for r in tx.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpoints "
            "WHERE metadata ->> 'run_id' = ?",
            (run_id,),
        ).fetchall()
    ]


def copy_thread(tx: Tx, source: str, target: str) -> int:
    """Every checkpoint, blob and write of `source` under `target`, same ids."""
    copied = tx.execute(
        "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, "
        "parent_checkpoint_id, type, checkpoint, metadata) "
        "SELECT ?, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
        "metadata FROM checkpoints WHERE thread_id = ? "
        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET "
        "parent_checkpoint_id = EXCLUDED.parent_checkpoint_id, "
        "checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata",
        (target, source),
    ).rowcount
    tx.execute(
        "INSERT INTO checkpoint_blobs (thread_id, checkpoint_ns, channel, version, type, blob) "
        "SELECT ?, checkpoint_ns, channel, version, type, blob FROM checkpoint_blobs "
        "WHERE thread_id = ? ON CONFLICT (thread_id, checkpoint_ns, channel, version) "
        "DO UPDATE SET type = EXCLUDED.type, blob = EXCLUDED.blob",
        (target, source),
    )
    tx.execute(
        "INSERT INTO checkpoint_writes (thread_id, checkpoint_ns, checkpoint_id, task_id, "
        "task_path, idx, channel, type, blob) "
        "SELECT ?, checkpoint_ns, checkpoint_id, task_id, task_path, idx, channel, type, blob "
        "FROM checkpoint_writes WHERE thread_id = ? "
        "ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE SET "
        "channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob",
        (target, source),
    )
    return int(copied)


def _row(conn: Conn, row: tuple[Any, ...]) -> CheckpointRow:
    thread_id, ns, checkpoint_id, parent, document, metadata = row
    blobs = conn.execute(
        _BLOBS, (json.dumps(document.get("channel_versions") or {}), thread_id, ns)
    ).fetchall()
    writes = conn.execute(_PENDING_WRITES, (thread_id, ns, checkpoint_id)).fetchall()
    type_, blob = join(document, blobs)
    return CheckpointRow(
        thread_id,
        ns,
        checkpoint_id,
        parent,
        type_,
        blob,
        json.dumps(metadata).encode(),
        writes=[WriteRow(*w) for w in writes],
    )


def get(conn: Conn, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> CheckpointRow | None:
    if checkpoint_id:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM checkpoints "
            "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?",
            (thread_id, checkpoint_ns, checkpoint_id),
        ).fetchone()
    else:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = ? "
            "ORDER BY checkpoint_id DESC LIMIT 1",
            (thread_id, checkpoint_ns),
        ).fetchone()
    return None if row is None else _row(conn, row)


def list_(conn: Conn, query: CheckpointQuery) -> Iterator[CheckpointRow]:
    where: list[str] = []
    params: list[Any] = []
    if query.thread_id:
        where.append("thread_id = ?")
        params.append(query.thread_id)
        if query.checkpoint_ns is not None:
            where.append("checkpoint_ns = ?")
            params.append(query.checkpoint_ns)
        if query.checkpoint_id:
            where.append("checkpoint_id = ?")
            params.append(query.checkpoint_id)
    if query.filter_json:
        try:
            filter_ = json.loads(query.filter_json)
        except ValueError as exc:
            raise InvalidArgument(f"filter_json is not valid JSON: {exc}") from None
        if not isinstance(filter_, dict):
            raise InvalidArgument("filter_json must be a JSON object")
        for key in filter_:
            if not _FILTER_KEY.match(key):
                raise InvalidArgument(
                    f"Invalid filter key: {key!r}. Filter keys must contain only alphanumeric "
                    "characters, underscores, dots, and hyphens."
                )
        # PostgresSaver's own filter: JSONB containment.
        where.append("metadata @> ?::jsonb")
        params.append(json.dumps(filter_))
    if query.before_checkpoint_id:
        where.append("checkpoint_id < ?")
        params.append(query.before_checkpoint_id)
    sql = f"SELECT {_COLUMNS} FROM checkpoints"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY checkpoint_id DESC"
    if query.limit > 0:
        sql += " LIMIT ?"
        params.append(query.limit)
    for row in conn.execute(sql, params).fetchall():
        yield _row(conn, row)
