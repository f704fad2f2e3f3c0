"""The PostgreSQL backend of the store contract: any number of replicas on one database.

Each operation is its own transaction on a pooled connection, run in a worker
thread so the event loop never waits on the network for a write. Concurrency
control is PostgreSQL's: an operation locks the turn row it changes
(`SELECT ... FOR UPDATE`, see `Tx.for_update`), one live turn per thread is a
partial unique index, and an operation that loses a race (a serialization
failure, a deadlock, or a unique violation from a concurrent insert) is run
again from the start: the second run sees the winner's commit and answers as the
state machine does (the same turn again, or the thread's live turn).

Point reads run on the event loop's thread on one connection of their own, like
the SQLite backend's; snapshots and reads that may be large (checkpoints,
WatchTurn's turn and events) run in the pool, off the loop (`read`).

When the database cannot be reached an operation fails with UNAVAILABLE, saying
so; nothing is acknowledged that did not commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout
from turnkeeper import tracing

from turnkeeper_server.errors import Unavailable
from turnkeeper_server.store import postgres_checkpoints, stats
from turnkeeper_server.store.contract import CheckpointRows, Conn, Publish, TurnChanged, Tx
from turnkeeper_server.store.postgres_schema import migrate
from turnkeeper_server.store.records import OutboxRow, TurnStatusRow
from turnkeeper_server.store.status_cache import load_status

log = logging.getLogger(__name__)

T = TypeVar("T")

# Connections (and worker threads) per replica for writes.
POOL_SIZE = 8
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
# The read connection lives on the event loop's thread: after a failed connect,
# reads fail at once for this long instead of each stalling the loop on a connect.
READER_BACKOFF = 1.0
# Runs of one operation that lost a race before the error is returned.
MAX_RUNS = 8

# The LISTEN/NOTIFY channel: payload a turn_id whose events or state changed.
CHANNEL = "turnkeeper_turns"
# How long the listener waits for a notification before checking it should stop.
LISTEN_POLL = 0.25

_RETRIED = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected, pg_errors.UniqueViolation)
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


class PgConn:
    """A psycopg connection behind the shared dialect."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> psycopg.Cursor[Any]:
        if parameters:
            return self.raw.execute(translate(sql), parameters)
        return self.raw.execute(_PREFIX.sub("", sql))

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> None:
        with self.raw.cursor() as cur:
            cur.executemany(translate(sql), seq_of_parameters)


# The advisory-lock class of `claim_thread` (any fixed number; the migrations' lock
# is a one-key lock, a separate space).
THREAD_LOCK = 0x74687264  # "thrd"


class PgTx:
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # Replicas take outbox ids concurrently: reserving a run of them would serialise
    # every append, so each message keeps a row of its own (store/outbox_rows.py).
    outbox_run_insert = ""
    checkpoints: CheckpointRows = postgres_checkpoints

    def __init__(self, conn: psycopg.Connection[Any], trace: str | None = None) -> None:
        self._conn = PgConn(conn)
        self._after: list[Callable[[], None]] = []
        # The W3C traceparent of the call that queued this operation; None unless
        # tracing is on (outbox rows carry it to NATS).
        self.trace = trace

    @property
    def conn(self) -> PgConn:
        return self._conn

    @property
    def raw(self) -> psycopg.Connection[Any]:
        return self._conn.raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        return self._conn.execute(sql, params)

    def after_commit(self, callback: Callable[[], None]) -> None:
        self._after.append(callback)

    def claim_thread(self, thread_id: str) -> bool:
        # A transaction-scoped advisory lock, tried without waiting: two replicas'
        # sweeps each holding some of a thread's turns would otherwise both see the
        # other's (not yet deleted) rows and neither would erase the emptied thread.
        # Keyed (class, hash of the id): a hash collision only defers a thread.
        row = self.raw.execute(
            "SELECT pg_try_advisory_xact_lock(%s, hashtext(%s))", (THREAD_LOCK, thread_id)
        ).fetchone()
        return row is not None and bool(row[0])

    def announce(self, turn_ids: Sequence[str]) -> None:
        # Delivered by PostgreSQL only if and when this transaction commits.
        if turn_ids:
            self.raw.execute(
                "SELECT pg_notify(%s, turn_id) FROM unnest(%s::text[]) AS turn_id",
                (CHANNEL, list(turn_ids)),
            )


class PostgresDatabase:
    kind = "postgres"
    checkpoints: CheckpointRows = postgres_checkpoints

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        self.pool_size = pool_size
        self._pool: ConnectionPool[psycopg.Connection[Any]] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._reader: PgConn | None = None
        self._reader_lock = threading.Lock()
        self._reader_down_until = 0.0
        self._listener: Listener | None = None
        self._closed = False
        # Set by the server when tracing is on: each write keeps its caller's trace
        # context (contextvars do not cross into the worker threads).
        self.traced = False

    def describe(self) -> str:
        return f"PostgreSQL {redact(self.url)}"

    # -- lifecycle ---------------------------------------------------------------

    def open(self) -> None:
        try:
            with psycopg.connect(self.url, autocommit=True, **CONNECTION) as conn:
                migrate(conn)
        except psycopg.OperationalError as exc:
            raise Unavailable(f"cannot reach PostgreSQL at {redact(self.url)}: {exc}") from None
        self._pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self.pool_size,
            kwargs=dict(CONNECTION),
            timeout=CONNECT_TIMEOUT,
            # A connection that died with the server is replaced, not handed out.
            check=ConnectionPool.check_connection,
            open=False,
            name="turnkeeper",
        )
        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        self._executor = ThreadPoolExecutor(self.pool_size, thread_name_prefix="turnkeeper-pg")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.stop()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
        if self._pool is not None:
            self._pool.close()
        if self._reader is not None:
            self._reader.raw.close()

    # -- reads -------------------------------------------------------------------

    def read_conn(self) -> Conn:
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
                raise _unavailable(self.url, exc) from None
            self._reader = PgConn(raw)
            return self._reader

    async def read(self, fn: Callable[[Conn], T]) -> T:
        if self._closed or self._executor is None:
            raise RuntimeError("database is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._read, fn)

    def _read(self, fn: Callable[[Conn], T]) -> T:
        assert self._pool is not None
        try:
            with self._pool.connection() as conn:
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                return fn(PgConn(conn))
        except (psycopg.OperationalError, PoolTimeout) as exc:
            raise _unavailable(self.url, exc) from None

    # -- outbox and notification ---------------------------------------------------

    async def reclaim(self) -> None:
        """Nothing: autovacuum makes deleted rows' space reusable, and VACUUM FULL's
        exclusive lock is the operator's call, not a background sweeper's."""

    def listen(self, on_change: TurnChanged) -> None:
        self._listener = Listener(self.url, asyncio.get_running_loop(), on_change)
        self._listener.start()

    async def drain_outbox(self, limit: int, publish: Publish) -> int:
        """Claim rows with FOR UPDATE SKIP LOCKED in a transaction held while they
        are published: another replica's publisher skips them, and takes them over
        if this one dies (the transaction rolls back with its connection)."""
        if self._closed or self._executor is None or self._pool is None:
            return 0
        pool, loop, executor = self._pool, asyncio.get_running_loop(), self._executor
        try:
            conn = await loop.run_in_executor(executor, pool.getconn)
        except PoolTimeout as exc:
            raise _unavailable(self.url, exc) from None
        try:
            rows = await loop.run_in_executor(executor, _claim, conn, limit)
            if not rows or not await publish(rows):
                await loop.run_in_executor(executor, conn.rollback)
                return 0
            ids = [row[0] for row in rows]
            await loop.run_in_executor(executor, _delete_claimed, conn, ids)
            return sum(row[4] for row in rows)
        except psycopg.OperationalError as exc:
            raise _unavailable(self.url, exc) from None
        finally:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                with contextlib.suppress(psycopg.Error):
                    conn.rollback()
            pool.putconn(conn)

    def outbox_backlog(self) -> int:
        return stats.outbox_backlog(self.read_conn())

    # -- writes ------------------------------------------------------------------

    # Writes run concurrently on the pool's connections, each in its own transaction.
    queues_writes = False

    def turn_status(self, turn_id: str) -> TurnStatusRow | None:
        # Other replicas write the same rows: TurnStatus reads the database every time.
        return load_status(self.read_conn(), turn_id)

    def queue_write(self, fn: Callable[[Tx], T], *, followed: bool = False) -> asyncio.Future[T]:
        raise RuntimeError("PostgreSQL runs writes concurrently: await write() for each, in order")

    async def write(self, fn: Callable[[Tx], T]) -> T:
        if self._closed or self._executor is None:
            raise RuntimeError("database is closed")
        loop = asyncio.get_running_loop()
        trace = None
        if self.traced:
            carrier: dict[str, str] = {}
            tracing.inject(carrier)
            trace = carrier.get("traceparent")
        result, after = await loop.run_in_executor(self._executor, self._run, fn, trace)
        for callback in after:
            try:
                callback()
            except Exception:
                log.exception("after-commit callback failed")
        return result

    def _run(
        self, fn: Callable[[Tx], T], trace: str | None = None
    ) -> tuple[T, list[Callable[[], None]]]:
        assert self._pool is not None
        for run in range(1, MAX_RUNS + 1):
            try:
                # The pool's context commits on a clean exit and rolls back on an error.
                with self._pool.connection() as conn:
                    tx = PgTx(conn, trace)
                    result = fn(tx)
                return result, tx._after
            except _RETRIED as exc:
                if run == MAX_RUNS:
                    raise Unavailable(
                        f"the operation lost {MAX_RUNS} races with concurrent ones in a row "
                        f"({type(exc).__name__}); retry it"
                    ) from None
                # Let the winner finish before running again (spread out, not in lockstep).
                time.sleep(0.001 * run)
            except (psycopg.OperationalError, PoolTimeout) as exc:
                raise _unavailable(self.url, exc) from None
        raise AssertionError("unreachable")


def _claim(conn: psycopg.Connection[Any], limit: int) -> list[OutboxRow]:
    rows = conn.execute(
        "SELECT id, subject, payload, traceparent, messages FROM outbox ORDER BY id "
        "LIMIT %s FOR UPDATE SKIP LOCKED",
        (limit,),
    ).fetchall()
    return [OutboxRow(int(r[0]), str(r[1]), bytes(r[2]), r[3], int(r[4])) for r in rows]


def _delete_claimed(conn: psycopg.Connection[Any], ids: list[int]) -> None:
    conn.execute("DELETE FROM outbox WHERE id = ANY(%s)", (ids,))
    conn.commit()


class Listener:
    """LISTEN on a connection of its own, in a thread: each notification wakes the
    WatchTurn streams of its turn on this replica's loop."""

    def __init__(self, url: str, loop: asyncio.AbstractEventLoop, on_change: TurnChanged) -> None:
        self.url = url
        self.loop = loop
        self.on_change = on_change
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="turnkeeper-listen", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        # The thread sees the flag within LISTEN_POLL and closes its connection.
        self._stop.set()
        self._thread.join(timeout=LISTEN_POLL + 1)

    def _deliver(self, turn_id: str | None) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens
            self.loop.call_soon_threadsafe(self.on_change, turn_id)

    def _run(self) -> None:
        connected_before = False
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True, **CONNECTION) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    if connected_before:
                        # Changes while the connection was down went unheard.
                        self._deliver(None)
                    connected_before = True
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=LISTEN_POLL):
                            self._deliver(note.payload)
            except psycopg.Error as exc:
                log.warning("LISTEN connection to PostgreSQL lost (%s); reconnecting", exc)
                self._stop.wait(1.0)


def _unavailable(url: str, exc: BaseException) -> Unavailable:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Unavailable(f"PostgreSQL at {redact(url)} is unreachable: {detail}")
