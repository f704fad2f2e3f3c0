"""PostgreSQL's reads: point reads on the event loop's thread on one connection of
their own, like the SQLite backend's; snapshots and reads that may be large
(checkpoints, WatchTurn's turn and events) in the pool, off the loop."""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg_pool import ConnectionPool, PoolTimeout

from turnkeeper_server.errors import Unavailable
from turnkeeper_server.store.contract import Conn
from turnkeeper_server.store.postgres_conn import CONNECTION, PgConn, redact, unavailable

T = TypeVar("T")

# The read connection lives on the event loop's thread: after a failed connect,
# reads fail at once for this long instead of each stalling the loop on a connect.
READER_BACKOFF = 1.0
# What a read runs first: its snapshot (`Reads.run`).
BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"


class Reads:
    """A replica's reads: the event loop's connection (`conn`) and the pooled reads
    (`run`, in a worker thread)."""

    def __init__(self, url: str, pool_size: int) -> None:
        self.url = url
        self.pool_size = pool_size
        # The pool, shared with the outbox drain; set when the database opens.
        self.pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._reader: PgConn | None = None
        self._reader_lock = threading.Lock()
        self._reader_down_until = 0.0
        # The read functions (their code) seen to make more than one statement: they
        # run on a snapshot at once (`run`).
        self._several: set[object] = set()

    def conn(self) -> Conn:
        with self._reader_lock:
            reader = self._reader
            if reader is not None and not reader.raw.closed and not reader.raw.broken:
                return reader
            if time.monotonic() < self._reader_down_until:
                raise Unavailable(
                    f"PostgreSQL at {redact(self.url)} is unreachable (the last attempt "
                    "to connect failed a moment ago)"
                )
            try:
                raw = psycopg.connect(self.url, autocommit=True, **CONNECTION)
            except psycopg.OperationalError as exc:
                self._reader_down_until = time.monotonic() + READER_BACKOFF
                raise unavailable(self.url, exc) from None
            self._reader = PgConn(raw)
            return self._reader

    def run(self, fn: Callable[[Conn], T]) -> T:
        """`fn` on a snapshot: BEGIN, its statements, COMMIT (decisions 361, 434). A
        read of one statement needs no transaction (its statement is its snapshot)
        and runs without one (decision 433): a function not known to make more runs
        so, and if it makes a second statement it runs again from the start on a
        snapshot, and always so from then on. A connection found dead (the server
        restarted since it was pooled) is dropped by the pool and the read runs again
        on another, at most once per pooled connection."""
        assert self.pool is not None
        key = _read_key(fn)
        for attempt in range(self.pool_size + 1):
            try:
                with self.pool.connection() as conn:
                    if key not in self._several:
                        try:
                            return _one_statement(conn, fn)
                        except _SecondStatement:
                            self._several.add(key)
                    return _snapshot(conn, fn)
            except psycopg.OperationalError as exc:
                if attempt < self.pool_size and isinstance(exc, _DeadConnection):
                    continue
                raise unavailable(self.url, exc) from None
            except PoolTimeout as exc:
                raise unavailable(self.url, exc) from None
        raise AssertionError("unreachable")

    def close(self) -> None:
        if self._reader is not None:
            self._reader.raw.close()


class _DeadConnection(psycopg.OperationalError):
    """A pooled connection that was found dead with the server on use."""


class _SecondStatement(BaseException):
    """A read run without a transaction made a second statement: it runs again on a
    snapshot. A BaseException, so that no `except Exception` in a read function
    swallows it."""


class _OneStatementConn(PgConn):
    """A read's connection for its first statement alone (`_one_statement`)."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        super().__init__(conn)
        self._made = False

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        if self._made:
            raise _SecondStatement
        self._made = True
        return super().execute(sql, parameters)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> None:
        raise _SecondStatement


def _read_key(fn: Callable[..., Any]) -> object:
    """What stands for a read function across calls: its code (a lambda or a
    partial made anew for each call shares it)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__code__", fn)


def _one_statement(conn: psycopg.Connection[Any], fn: Callable[[Conn], T]) -> T:
    """`fn` on an autocommit connection, outside a transaction and a pipeline, for
    as long as it makes one statement (its own snapshot); _SecondStatement if it
    makes another."""
    try:
        return fn(_OneStatementConn(conn))
    except psycopg.OperationalError as exc:
        if conn.broken or conn.closed:
            raise _DeadConnection(str(exc)) from exc
        raise


def _snapshot(conn: psycopg.Connection[Any], fn: Callable[[Conn], T]) -> T:
    """`fn` in a read-only REPEATABLE READ transaction on an autocommit connection,
    each statement sent and answered in turn. Not in pipeline mode (decision 434): a
    read fetches each statement's rows before it sends the next, so the pipeline
    saved only the BEGIN's round trip, and psycopg's pipeline (its entry and exit,
    a flush request per fetch, the results' queue) cost more CPU than that round
    trip and, on a local socket, more time."""
    try:
        conn.execute(BEGIN_READ)
        result = fn(PgConn(conn))
        conn.execute("COMMIT")
        return result
    except BaseException as exc:
        if conn.broken or conn.closed:
            if isinstance(exc, psycopg.OperationalError):
                raise _DeadConnection(str(exc)) from exc
            raise
        # Leave no transaction open on a pooled connection (`fn` refused, say).
        with contextlib.suppress(psycopg.Error):
            conn.execute("ROLLBACK")
        raise
