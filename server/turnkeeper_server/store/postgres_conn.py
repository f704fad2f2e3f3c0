"""A connection to PostgreSQL: the settings every connection of a replica is opened
with, the shared dialect spoken on it (`PgConn`), and what a caller is told when the
database cannot be reached."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

import psycopg

from turnkeeper_server.errors import Unavailable

# How an INSERT asks for its rows' ids back (`PgConn.send_returning`).
RETURNING_IDS = " RETURNING id"


class Ids:
    """The ids an `INSERT ... RETURNING id` sent on the writer gets back, read once
    its statement's result has arrived (after the group's sync or commit): the
    statement's rows, or the array in one column of a statement it rode in
    (store/postgres_riders.py). In increasing order: the rows' order, as the
    identity took them."""

    __slots__ = ("column", "cursor")

    def __init__(self) -> None:
        self.cursor: Any = None
        self.column = -1

    def get(self) -> list[int]:
        if self.column < 0:
            ids = [int(row[0]) for row in self.cursor.fetchall()]
        else:
            row = self.cursor.fetchone()
            ids = [int(i) for i in row[self.column] or ()]
        return sorted(ids)


class HeldSends(Protocol):
    """What a connection hands the writes whose answers nobody reads, on the
    writer's fast path (store/postgres_riders.py's `Riders`): held to ride as one
    statement, and sent before any statement of the operation's own. An INSERT
    that returns its ids gets them through the `Ids` it is given."""

    def send(
        self, owner: object, sql: str, params: Sequence[Any], ids: Ids | None = None
    ) -> None: ...

    def flush(self, notify: Sequence[str] = ()) -> None: ...


# How long a call waits for the database before it is UNAVAILABLE.
CONNECT_TIMEOUT = 5
# Every connection: a peer that vanished without closing (a partition, a host
# gone) is noticed in seconds, not at the kernel's default of hours. libpq ignores
# these on Unix sockets.
CONNECTION: dict[str, Any] = {
    "connect_timeout": CONNECT_TIMEOUT,
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}

_PREFIX = re.compile(r"\b(?:main|sessions)\.")
_translated: dict[str, str] = {}


def translate(sql: str) -> str:
    """The shared dialect (`?`, `main.`/`sessions.` prefixes) in PostgreSQL's."""
    out = _translated.get(sql)
    if out is None:
        out = _PREFIX.sub("", sql.replace("%", "%%")).replace("?", "%s")
        _translated[sql] = out
    return out


def redact(url: str) -> str:
    """The URL without its password, for logs and error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def unavailable(url: str, exc: BaseException) -> Unavailable:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Unavailable(f"PostgreSQL at {redact(url)} is unreachable: {detail}")


# What a SELECT may call that changes something a rollback would undo.
# Whole words: a column may be called `updated_at`.
_SIDE_EFFECTS = re.compile(
    r"nextval|setval|pg_notify|advisory|\b(?:INSERT|DELETE|MERGE)\b|(?<!FOR )(?<!KEY )\bUPDATE\b",
    re.I,
)


def _reads_only(sql: str) -> bool:
    """Whether `sql` only reads (row locks aside: `FOR UPDATE` changes no row)."""
    return sql.lstrip()[:7].upper() == "SELECT " and _SIDE_EFFECTS.search(sql) is None


class PgConn:
    """A psycopg connection behind the shared dialect; `pipeline` when the writer
    runs it in pipeline mode (statements sent without waiting for each)."""

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        pipeline: psycopg.Pipeline | None = None,
        riders: HeldSends | None = None,
    ) -> None:
        self.raw = conn
        self.pipeline = pipeline
        # The writer's held sends, on its fast path (store/postgres_riders.py).
        self.riders = riders
        # Whether anything but a plain SELECT went through it: an operation of the
        # writer's fast path that refuses itself having only read is left out
        # without rolling its group back (store/postgres.py, decision 670).
        self.wrote = False

    def send(self, sql: str, parameters: Sequence[Any] = (), /) -> None:
        """A write whose answer nobody reads (`Tx.send`): held to ride with the
        operation's others where the writer holds them, else run now."""
        self.wrote = True
        if self.riders is None:
            self.execute(sql, parameters)
            return
        self.riders.send(self, sql, parameters)

    def send_returning(self, sql: str, parameters: Sequence[Any], /) -> Ids:
        """`send` for an INSERT ending in RETURNING_IDS: its ids, readable once the
        statement's result has arrived."""
        self.wrote = True
        ids = Ids()
        if self.riders is None:
            ids.cursor = self.execute(sql, parameters)
        else:
            self.riders.send(self, sql, parameters, ids)
        return ids

    def flush(self) -> None:
        """Send what is held, before a statement of the operation's own."""
        if self.riders is not None:
            self.riders.flush()

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        if self.riders is not None:
            self.riders.flush()
        if not self.wrote and not _reads_only(sql):
            self.wrote = True
        if parameters:
            cursor = self.raw.execute(translate(sql), parameters)
        else:
            cursor = self.raw.execute(_PREFIX.sub("", sql))
        if self.pipeline is None:
            return cursor
        return PipelinedCursor(cursor, self.pipeline)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> None:
        self.wrote = True
        self.flush()
        with self.raw.cursor() as cur:
            cur.executemany(translate(sql), seq_of_parameters)


class PipelinedCursor:
    """A statement's cursor in pipeline mode. psycopg waits for its rows when they
    are fetched, but fills its row count only once its result has arrived: asking
    for it syncs the pipeline first, so `rowcount` means what it means elsewhere."""

    def __init__(self, cursor: psycopg.Cursor[Any], pipeline: psycopg.Pipeline) -> None:
        self._cursor = cursor
        self._pipeline = pipeline

    @property
    def rowcount(self) -> int:
        self._pipeline.sync()
        return self._cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cursor)
