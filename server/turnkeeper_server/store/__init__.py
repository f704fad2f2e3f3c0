"""Storage backends behind one contract (`contract`): SQLite files or PostgreSQL.

`sqlite` (connections, PRAGMAs, the group-commit writer) with `sqlite_schema`
(migrations) and `lockfile` (one writer per data directory); `postgres` with
`postgres_schema` and `postgres_checkpoints` (`--database-url`: replicas on one
database). `open_store` picks one from the settings: PostgreSQL when a database URL
is given, else the two SQLite files.
"""

from __future__ import annotations

from turnkeeper_server.config import Settings
from turnkeeper_server.store.contract import Conn, Cursor, Store, Tx

__all__ = ["Conn", "Cursor", "Store", "Tx", "open_store"]


def open_store(settings: Settings) -> Store:
    """The backend the settings name (not yet opened: call `open()`)."""
    if settings.database_url:
        from turnkeeper_server.store.postgres import PostgresDatabase

        return PostgresDatabase(settings.database_url)
    from turnkeeper_server.store.sqlite import Database

    return Database(
        settings.turns_path,
        settings.sessions_path,
        settings.synchronous,
        status_cache_turns=settings.status_cache_turns,
    )
