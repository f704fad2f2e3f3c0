"""Storage backends behind one contract (`contract`): SQLite files or PostgreSQL.

The service's bottom floor: it imports nothing above it. `records` holds the named
records that cross the contract; `sqlite` (connections, PRAGMAs, the group-commit
writer) with `sqlite_schema` (migrations), `sqlite_checkpoints` (langgraph-checkpoint-
sqlite's tables), `status_cache` (TurnStatus's rows, kept exact by the writer's
triggers) and `lockfile` (one writer per data directory); `postgres` with
`postgres_schema`, `postgres_checkpoints` and `postgres_pipeline`, its writer's
connection (`--database-url`: replicas on one database); `rows`, `outbox_rows` and
`stats`, SQL both backends share. `open_store` picks one: PostgreSQL when a database
URL is given, else the two SQLite files.
"""

from __future__ import annotations

from pathlib import Path

from turnkeeper_server.store.contract import Conn, Cursor, Store, Tx

__all__ = ["Conn", "Cursor", "Store", "Tx", "open_store"]


def open_store(
    *,
    database_url: str,
    turns_path: Path,
    sessions_path: Path,
    synchronous: str,
    status_cache_turns: int,
) -> Store:
    """The backend named (not yet opened: call `open()`)."""
    if database_url:
        from turnkeeper_server.store.postgres import PostgresDatabase

        return PostgresDatabase(database_url)
    from turnkeeper_server.store.sqlite import Database

    return Database(turns_path, sessions_path, synchronous, status_cache_turns=status_cache_turns)
