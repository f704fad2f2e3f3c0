"""The two backends' migrations make the same schema: store/sqlite_schema.py and
store/postgres_schema.py are two hand-written lists, and this is what keeps them one
schema. Each backend is migrated for real, through its store's own open (SQLite files
under tmp_path, a fresh PostgreSQL database of the session's cluster), then read back
from the database's catalogue and compared table by table: table names, column names,
nullability, primary keys, and types through the equivalence below.

Two readings make the backends' words comparable:

- a type is its class in TYPE_CLASSES: SQLite keeps the declared name (``INTEGER``,
  ``DOUBLE PRECISION``), PostgreSQL its own (``integer``, ``bigint``); a class is
  what the store writes and reads there, so a width (integer or bigint) does not
  count. A type neither class names fails the test: say which class it is here.
- a primary key column is NOT NULL: PostgreSQL says so, SQLite does not for a
  non-INTEGER key of a rowid table (a legacy of SQLite's that its documentation keeps
  for compatibility); the store never writes a NULL key on either.

ALLOWED lists the differences that are meant, each with its reason; a test below
keeps each entry true, so one that stops being a difference is removed, not kept.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

import psycopg
from turnkeeper_server.store.postgres import PostgresDatabase
from turnkeeper_server.store.sqlite import Database

from tests.support.postgres import PostgresCluster

Backend = Literal["sqlite", "postgres"]

# Each backend's type name → the class the two backends share.
TYPE_CLASSES: Final = {
    "sqlite": {
        "TEXT": "text",
        "INTEGER": "integer",
        "REAL": "float",
        "DOUBLE PRECISION": "float",
        "BLOB": "bytes",
    },
    "postgres": {
        "text": "text",
        "integer": "integer",
        "bigint": "integer",
        "double precision": "float",
        "bytea": "bytes",
    },
}


@dataclass(frozen=True)
class Allowed:
    """A table (column None) or a column that only `backend` has, or has otherwise."""

    backend: Backend
    table: str
    column: str | None
    reason: str


_SQLITE_SAVER = (
    "langgraph-checkpoint-sqlite's own table, as SqliteSaver.setup() makes it, so that "
    "stock SqliteSaver opens sessions.db; LangGraph's two savers differ by design"
)
_POSTGRES_SAVER = (
    "langgraph-checkpoint-postgres's own table, as PostgresSaver.setup() makes it "
    "(store/postgres_schema.py's SAVER_MIGRATIONS), so that stock PostgresSaver opens "
    "the database; LangGraph's two savers differ by design"
)

ALLOWED: Final = (
    Allowed(
        "sqlite",
        "sqlite_sequence",
        None,
        "SQLite's own bookkeeping of AUTOINCREMENT (outbox.id); PostgreSQL keeps an "
        "identity's sequence, which is not a table",
    ),
    Allowed("sqlite", "checkpoints", None, _SQLITE_SAVER),
    Allowed("sqlite", "writes", None, _SQLITE_SAVER),
    Allowed("postgres", "checkpoints", None, _POSTGRES_SAVER),
    Allowed("postgres", "checkpoint_blobs", None, _POSTGRES_SAVER),
    Allowed("postgres", "checkpoint_writes", None, _POSTGRES_SAVER),
    Allowed("postgres", "checkpoint_migrations", None, _POSTGRES_SAVER),
    Allowed(
        "postgres",
        "turns",
        "rowid",
        "ListTurns' page tokens are row ids: SQLite's turns has one of its own (the "
        "implicit rowid), PostgreSQL's is this column",
    ),
)


@dataclass(frozen=True)
class Table:
    # column name → (type, NOT NULL); the type in the backend's words, or its class
    columns: dict[str, tuple[str, bool]]
    primary_key: tuple[str, ...]


Schema = dict[str, Table]


def sqlite_schema(*paths: Path) -> Schema:
    """The tables of SQLite files, as one schema (turns.db and sessions.db are one
    store; a table in both, the version table, must be the same in each)."""
    schema: Schema = {}
    for path in paths:
        with sqlite3.connect(path) as conn:
            names = [
                name
                for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            ]
            for name in names:
                # (cid, name, type, notnull, default, position in the primary key)
                info = conn.execute(f"PRAGMA table_info('{name}')").fetchall()
                key = tuple(row[1] for row in sorted(info, key=lambda r: r[5]) if row[5])
                table = Table(
                    {
                        col: (kind, bool(notnull) or col in key)
                        for _, col, kind, notnull, _, _ in info
                    },
                    key,
                )
                assert schema.setdefault(name, table) == table, f"{name} differs between files"
    return schema


def postgres_schema(url: str) -> Schema:
    with psycopg.connect(url) as conn:
        keys: dict[str, list[str]] = {}
        for name, col in conn.execute(
            "SELECT tc.table_name, k.column_name"
            " FROM information_schema.table_constraints tc"
            " JOIN information_schema.key_column_usage k"
            "   USING (constraint_schema, constraint_name, table_name)"
            " WHERE tc.constraint_type = 'PRIMARY KEY' AND tc.table_schema = current_schema()"
            " ORDER BY tc.table_name, k.ordinal_position"
        ):
            keys.setdefault(name, []).append(col)
        schema: Schema = {}
        for name, col, nullable, kind in conn.execute(
            "SELECT table_name, column_name, is_nullable, data_type"
            " FROM information_schema.columns WHERE table_schema = current_schema()"
        ):
            table = schema.setdefault(name, Table({}, tuple(keys.get(name, ()))))
            table.columns[col] = (kind, nullable == "NO")
    return schema


def comparable(schema: Schema, backend: Backend) -> Schema:
    """`schema` without what ALLOWED lists for `backend`, its types as their classes."""
    out: Schema = {}
    for name, table in schema.items():
        allowed = {a.column for a in ALLOWED if a.backend == backend and a.table == name}
        if None in allowed:
            continue
        columns = {
            col: (_type_class(backend, name, col, kind), notnull)
            for col, (kind, notnull) in table.columns.items()
            if col not in allowed
        }
        out[name] = Table(columns, table.primary_key)
    return out


def _type_class(backend: Backend, table: str, column: str, kind: str) -> str:
    known = TYPE_CLASSES[backend].get(kind)
    assert known is not None, (
        f"{backend} {table}.{column} is {kind!r}, a type TYPE_CLASSES does not name"
    )
    return known


def migrated(tmp_path: Path, cluster: PostgresCluster) -> dict[Backend, Schema]:
    """Both backends migrated by their stores' own open, their schemas read back."""
    turns, sessions = tmp_path / "turns.db", tmp_path / "sessions.db"
    sqlite = Database(turns, sessions)
    sqlite.open()
    sqlite.close()
    url = cluster.new_database()
    postgres = PostgresDatabase(url)
    postgres.open()
    postgres.close()
    return {"sqlite": sqlite_schema(turns, sessions), "postgres": postgres_schema(url)}


def test_both_backends_migrate_to_the_same_tables_columns_and_keys(
    tmp_path: Path, postgres_cluster: PostgresCluster
) -> None:
    schemas = migrated(tmp_path, postgres_cluster)
    sqlite = comparable(schemas["sqlite"], "sqlite")
    postgres = comparable(schemas["postgres"], "postgres")
    assert sorted(sqlite) == sorted(postgres)
    for name in sorted(sqlite):
        assert sqlite[name].primary_key == postgres[name].primary_key, name
        # (type class, NOT NULL) by column: a difference names its column.
        assert sqlite[name].columns == postgres[name].columns, name


def test_each_allowed_difference_is_still_one(
    tmp_path: Path, postgres_cluster: PostgresCluster
) -> None:
    schemas = migrated(tmp_path, postgres_cluster)
    for allowed in ALLOWED:
        other: Backend = "postgres" if allowed.backend == "sqlite" else "sqlite"
        here, there = schemas[allowed.backend], schemas[other]
        assert allowed.table in here, allowed
        if allowed.column is not None:
            assert allowed.column in here[allowed.table].columns, allowed
            assert allowed.column not in there[allowed.table].columns, allowed
        elif allowed.table in there:
            # On both: they differ, in a column, a key, a nullability or a type class
            # (a type with no class counts as its own).
            assert _loose(here[allowed.table], allowed.backend) != _loose(
                there[allowed.table], other
            ), allowed


def _loose(table: Table, backend: Backend) -> Table:
    columns = {
        col: (TYPE_CLASSES[backend].get(kind, f"{backend} {kind}"), notnull)
        for col, (kind, notnull) in table.columns.items()
    }
    return Table(columns, table.primary_key)
