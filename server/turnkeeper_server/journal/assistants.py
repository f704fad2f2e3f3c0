"""Assistants as the LangGraph API knows them: a stored configuration of a graph
(config, context, metadata, a name and a description), versioned. An update writes
a new version and makes it the latest; `set_latest` points the assistant back at an
older one. Each graph a replica announced has a default assistant, made with the
announcement (engine/turns.py's startup Redrive), whose id is LangGraph's
deterministic one for the graph (turnkeeper._run_request.default_assistant_id).

The rows are few (one per configuration someone made); a search reads them all and
filters, sorts and pages here, the way LangGraph's server reads its assistants. The
SQL is plain: PostgreSQL accepts it too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from turnkeeper_server.errors import AlreadyExists, NotFound
from turnkeeper_server.store.contract import Conn, Tx


@dataclass(frozen=True)
class AssistantRecord:
    assistant_id: str
    graph_id: str
    version: int
    name: str
    description: str | None
    config: dict[str, Any]
    context: dict[str, Any]
    metadata: dict[str, Any]
    created_at: float
    updated_at: float


_FIELDS = "graph_id, name, description, config, context, metadata"
_COLUMNS = f"assistant_id, {_FIELDS}, version, created_at, updated_at"
_VERSION_COLUMNS = f"assistant_id, {_FIELDS}, version, created_at, created_at"


def _object(text: Any) -> dict[str, Any]:
    value = json.loads(text) if text else {}
    return value if isinstance(value, dict) else {}


def _record(row: Any) -> AssistantRecord:
    return AssistantRecord(
        assistant_id=row[0],
        graph_id=row[1],
        name=row[2],
        description=row[3],
        config=_object(row[4]),
        context=_object(row[5]),
        metadata=_object(row[6]),
        version=int(row[7]),
        created_at=row[8],
        updated_at=row[9],
    )


def get(conn: Conn, assistant_id: str) -> AssistantRecord | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM main.assistants WHERE assistant_id = ?", (assistant_id,)
    ).fetchone()
    return None if row is None else _record(row)


def _locked(tx: Tx, assistant_id: str) -> AssistantRecord | None:
    """As get, the row locked until the transaction ends (PostgreSQL replicas may
    version one assistant at once)."""
    row = tx.execute(
        f"SELECT {_COLUMNS} FROM main.assistants WHERE assistant_id = ?{tx.for_update}",
        (assistant_id,),
    ).fetchone()
    return None if row is None else _record(row)


def all_assistants(conn: Conn) -> list[AssistantRecord]:
    """Every assistant, oldest first (a search filters, sorts and pages them)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM main.assistants ORDER BY created_at, assistant_id"
    ).fetchall()
    return [_record(r) for r in rows]


def _insert_version(tx: Tx, record: AssistantRecord) -> None:
    tx.execute(
        f"INSERT INTO main.assistant_versions (assistant_id, {_FIELDS}, version, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (record.assistant_id, *_field_values(record), record.version, record.updated_at),
    )


def _field_values(record: AssistantRecord) -> tuple[Any, ...]:
    return (
        record.graph_id,
        record.name,
        record.description,
        json.dumps(record.config),
        json.dumps(record.context),
        json.dumps(record.metadata),
    )


def create(tx: Tx, record: AssistantRecord, *, if_exists: str) -> tuple[AssistantRecord, bool]:
    """A new assistant at version 1 (`record.version` is ignored). `if_exists`:
    "raise" (ALREADY_EXISTS) or "do_nothing" (the assistant as it is). Returns the
    assistant and whether it was made now."""
    made = replace(record, version=1, updated_at=record.created_at)
    # ON CONFLICT: two replicas announcing one graph at once (its default assistant)
    # or two creates of one id race on PostgreSQL; the loser finds the winner's.
    inserted = tx.execute(
        f"INSERT INTO main.assistants ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (assistant_id) DO NOTHING",
        (made.assistant_id, *_field_values(made), 1, made.created_at, made.created_at),
    )
    if not inserted.rowcount:
        if if_exists != "do_nothing":
            raise AlreadyExists(
                f"assistant {record.assistant_id} exists; "
                "pass if_exists='do_nothing' to get it instead"
            )
        existing = get(tx.conn, record.assistant_id)
        if existing is None:  # deleted between the conflict and this read
            raise AlreadyExists(f"assistant {record.assistant_id} changed meanwhile; try again")
        return existing, False
    _insert_version(tx, made)
    return made, True


def update(tx: Tx, assistant_id: str, changes: dict[str, Any], now: float) -> AssistantRecord:
    """A new version made of the latest with `changes` (graph_id, name, description,
    config, context replace; metadata merges, keys given replace), and made the
    latest. NOT_FOUND when there is no such assistant."""
    current = _locked(tx, assistant_id)
    if current is None:
        raise NotFound(f"assistant {assistant_id} not found")
    newest = tx.execute(
        "SELECT max(version) FROM main.assistant_versions WHERE assistant_id = ?",
        (assistant_id,),
    ).fetchone()
    version = max(int(newest[0] or 0), current.version) + 1
    metadata = {**current.metadata, **changes.get("metadata", {})}
    kept = {k: v for k, v in changes.items() if k != "metadata"}
    made = replace(current, **kept, metadata=metadata, version=version, updated_at=now)
    _insert_version(tx, made)
    _set(tx, made)
    return made


def _set(tx: Tx, record: AssistantRecord) -> None:
    tx.execute(
        "UPDATE main.assistants SET graph_id = ?, name = ?, description = ?, config = ?, "
        "context = ?, metadata = ?, version = ?, updated_at = ? WHERE assistant_id = ?",
        (*_field_values(record), record.version, record.updated_at, record.assistant_id),
    )


def versions(conn: Conn, assistant_id: str) -> list[AssistantRecord]:
    """The assistant's versions, newest first (each as it was written: its
    created_at is both its times)."""
    rows = conn.execute(
        f"SELECT {_VERSION_COLUMNS} FROM main.assistant_versions WHERE assistant_id = ? "
        "ORDER BY version DESC",
        (assistant_id,),
    ).fetchall()
    return [_record(r) for r in rows]


def set_latest(tx: Tx, assistant_id: str, version: int, now: float) -> AssistantRecord:
    """Point the assistant at one of its versions. NOT_FOUND for an assistant or a
    version there is not."""
    current = _locked(tx, assistant_id)
    if current is None:
        raise NotFound(f"assistant {assistant_id} not found")
    row = tx.execute(
        f"SELECT {_VERSION_COLUMNS} FROM main.assistant_versions "
        "WHERE assistant_id = ? AND version = ?",
        (assistant_id, version),
    ).fetchone()
    if row is None:
        raise NotFound(f"version {version} not found for assistant {assistant_id}")
    made = replace(_record(row), created_at=current.created_at, updated_at=now)
    _set(tx, made)
    return made


def delete(tx: Tx, assistant_id: str) -> bool:
    """The assistant and its versions; False when there was none."""
    tx.execute("DELETE FROM main.assistant_versions WHERE assistant_id = ?", (assistant_id,))
    deleted = tx.execute("DELETE FROM main.assistants WHERE assistant_id = ?", (assistant_id,))
    return bool(deleted.rowcount)
