"""The PostgreSQL backend of the store contract: any number of replicas on one database.

Writes are group-committed, as on SQLite (store/group_commit.py, decision 265): one
writer thread per replica, on a connection of its own, runs whatever operations
are queued at that moment in one transaction and commits them together, so
concurrent turns share a commit and its WAL flush, and an operation costs its own
statements, not a pool checkout, a BEGIN and a COMMIT.

Concurrency control between replicas is PostgreSQL's: an operation locks the turn
row it changes (`SELECT ... FOR UPDATE`, see `Tx.for_update`), one live turn per
thread is a partial unique index. A group that loses a race with another replica
(a serialization failure, a deadlock, or a unique violation from a concurrent
insert) is rolled back and run again from the start: the second run sees the
winner's commit and answers as the state machine does (the same turn again, or the
thread's live turn). An operation that fails is left out the same way: the group
is rolled back and run again without it, so its partial writes never commit and
the others' do; no savepoint costs a round trip per operation on the happy path.

Point reads run on the event loop's thread on one connection of their own, like
the SQLite backend's; snapshots and reads that may be large (checkpoints,
WatchTurn's turn and events) run in the pool, off the loop (`read`).

When the database cannot be reached an operation fails with UNAVAILABLE, saying
so; nothing is acknowledged that did not commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool, PoolTimeout

from turnkeeper_server.errors import InvalidArgument, Unavailable
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.store import postgres_checkpoints, stats
from turnkeeper_server.store.contract import CheckpointRows, Conn, Publish, TurnChanged, Tx
from turnkeeper_server.store.group_commit import GroupWriter, Job, settle
from turnkeeper_server.store.postgres_pipeline import SendingConnection
from turnkeeper_server.store.postgres_schema import migrate
from turnkeeper_server.store.records import OutboxRow, TurnStatusRow
from turnkeeper_server.store.status_cache import load_status

log = logging.getLogger(__name__)

T = TypeVar("T")

# Connections (and worker threads) per replica for snapshot reads and the outbox
# publisher; writes have the writer's connection.
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
# Runs of a group whose commit itself lost a race before every operation of it is
# refused.
MAX_COMMITS = 8

# What a read runs first: its snapshot (`_read`).
BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY"
# The LISTEN/NOTIFY channel: payload a turn_id whose events or state changed.
CHANNEL = "turnkeeper_turns"
# How long the listener waits for a notification before checking it should stop.
LISTEN_POLL = 0.25

# How every outbox row is written (store/outbox_rows.py).
OUTBOX_INSERT = "INSERT INTO main.outbox "
# How soon after a drain that found the outbox empty (or took less than it asked)
# the next finds it empty without looking, if this replica's writer committed no
# outbox row since: the publisher looks again right after each batch it sent
# (decision 432). Longer than that, never as long as its idle poll, which is what
# finds other replicas' rows.
QUIET_FOR = 0.05

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
    """A psycopg connection behind the shared dialect; `pipeline` when the writer
    runs it in pipeline mode (statements sent without waiting for each)."""

    def __init__(
        self, conn: psycopg.Connection[Any], pipeline: psycopg.Pipeline | None = None
    ) -> None:
        self.raw = conn
        self.pipeline = pipeline
        # Whether an outbox row was written through it (`PostgresDatabase.drain_outbox`).
        self.wrote_outbox = False

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        if sql.startswith(OUTBOX_INSERT):
            self.wrote_outbox = True
        if parameters:
            cursor = self.raw.execute(translate(sql), parameters)
        else:
            cursor = self.raw.execute(_PREFIX.sub("", sql))
        if self.pipeline is None:
            return cursor
        return PipelinedCursor(cursor, self.pipeline)

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> None:
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


# Turns whose record the writer keeps (`TurnCache`): the running turns of one
# replica's agents are far fewer; the oldest goes first.
TURN_CACHE_SIZE = 4096


class TurnCache:
    """The writer's record of the turns it wrote last (decision 470): their
    attempts, state, last_seq and rewinds as its own commits left them, so that an
    append or a checkpoint write of a turn this replica's agent is running needs no
    read of the turn row mid-group. Each use is checked by a statement sent with the
    operation's others (journal/transitions.py's `fenced_turn`), which fails the
    group when the row holds other values (another replica, a re-drive, a cancel);
    the group then runs again carefully, without the cache, and the cache is
    emptied. What a group's operations remember is pending until it commits. The
    writer thread alone uses it."""

    def __init__(self, size: int = TURN_CACHE_SIZE) -> None:
        self.size = size
        self._turns: OrderedDict[str, TurnRecord] = OrderedDict()
        # This transaction's: a record, or None for a turn it changed otherwise.
        self._pending: dict[str, TurnRecord | None] = {}

    def get(self, turn_id: str) -> TurnRecord | None:
        if turn_id in self._pending:
            return self._pending[turn_id]
        return self._turns.get(turn_id)

    def put(self, turn: TurnRecord) -> None:
        if turn.input_json or turn.interrupt_json or turn.resume_json or turn.error:
            # Nobody relies on these (`Tx.known_turn`), and an input may be large.
            turn = dataclasses.replace(
                turn, input_json="", interrupt_json=None, resume_json=None, error=""
            )
        self._pending[turn.turn_id] = turn

    def drop(self, turn_id: str) -> None:
        self._pending[turn_id] = None

    def commit(self) -> None:
        for turn_id, turn in self._pending.items():
            if turn is None:
                self._turns.pop(turn_id, None)
            else:
                self._turns[turn_id] = turn
                self._turns.move_to_end(turn_id)
        self._pending.clear()
        while len(self._turns) > self.size:
            self._turns.popitem(last=False)

    def discard(self) -> None:
        """The transaction rolled back: what it remembered goes."""
        self._pending.clear()

    def clear(self) -> None:
        self._turns.clear()
        self._pending.clear()

    def __len__(self) -> int:
        return len(self._turns)


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

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        trace: str | None = None,
        pipeline: psycopg.Pipeline | None = None,
        cache: TurnCache | None = None,
    ) -> None:
        self._conn = PgConn(conn, pipeline)
        # The writer's turn records, when the group runs fast (`TurnCache`).
        self._cache = cache
        self._after: list[Callable[[], None]] = []
        # The turns this operation announced: the group sends them all in one
        # notification at its commit (`notify`).
        self._announced: list[str] = []
        # The W3C traceparent of the call that queued this operation; None unless
        # tracing is on (outbox rows carry it to NATS).
        self.trace = trace

    @property
    def conn(self) -> PgConn:
        return self._conn

    @property
    def raw(self) -> psycopg.Connection[Any]:
        return self._conn.raw

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
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
        # Sent with the group's commit, one notification for all its operations'
        # turns (`notify`); delivered by PostgreSQL only if and when it commits.
        self._announced.extend(turn_ids)

    def known_turn(self, turn_id: str) -> TurnRecord | None:
        return None if self._cache is None else self._cache.get(turn_id)

    def remember_turn(self, turn: TurnRecord) -> None:
        # A fast group that fails is run again from the start, its pending records
        # discarded: an operation that refused itself leaves none behind.
        if self._cache is not None:
            self._cache.put(turn)

    def forget_turn(self, turn_id: str) -> None:
        if self._cache is not None:
            self._cache.drop(turn_id)


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
        self._writer: GroupWriter | None = None
        # The writer thread's connection; None until its first group, and again
        # after it broke (the next group connects anew).
        self._write_conn: WriteConnection | None = None
        # The writer's records of the turns it wrote (`TurnCache`, decision 470).
        self.turn_cache = TurnCache()
        # The backend of this replica's writer connection: what it announces, the
        # writer's after-commit callbacks have already told this replica's watchers,
        # so the listener skips it (decision 362).
        self._own_backends: set[int] = set()
        self._closed = False
        self._traced = False
        # Groups committed with outbox rows (counted on the writer thread, before
        # their callers hear of it), and when a drain last saw the outbox empty and
        # at which count (`drain_outbox`).
        self._outbox_commits = 0
        self._quiet: tuple[float, int] | None = None
        # The read functions (their code) seen to make more than one statement: they
        # run on a snapshot at once (`_read`).
        self._several: set[object] = set()

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
            # Autocommit: a read opens its own transaction with its first statement
            # (`_read`). No check on checkout (a round trip per read): a read that
            # finds its connection dead with the server runs again on another, and
            # the pool replaces the dead one when it comes back (decision 361).
            # Read-only by default, also outside a transaction (a read of one
            # statement, decision 433); the outbox drain's transaction says READ WRITE.
            kwargs={
                **CONNECTION,
                "autocommit": True,
                "options": "-c default_transaction_read_only=on",
            },
            timeout=CONNECT_TIMEOUT,
            open=False,
            name="turnkeeper",
        )
        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        self._executor = ThreadPoolExecutor(self.pool_size, thread_name_prefix="turnkeeper-pg")
        self._writer = GroupWriter("turnkeeper-pg-writer", self._run_group)
        self._writer.traced = self._traced
        self._writer.start(on_exit=self._close_write_conn)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._listener is not None:
            self._listener.stop()
        if self._writer is not None:
            self._writer.stop()
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
        """`fn` on a snapshot: BEGIN, its statements, COMMIT (decisions 361, 434). A
        read of one statement needs no transaction (its statement is its snapshot)
        and runs without one (decision 433): a function not known to make more runs
        so, and if it makes a second statement it runs again from the start on a
        snapshot, and always so from then on. A connection found dead (the server
        restarted since it was pooled) is dropped by the pool and the read runs again
        on another, at most once per pooled connection."""
        assert self._pool is not None
        key = _read_key(fn)
        for attempt in range(self.pool_size + 1):
            try:
                with self._pool.connection() as conn:
                    if key not in self._several:
                        try:
                            return _one_statement(conn, fn)
                        except _SecondStatement:
                            self._several.add(key)
                    return _snapshot(conn, fn)
            except psycopg.OperationalError as exc:
                if attempt < self.pool_size and isinstance(exc, _DeadConnection):
                    continue
                raise _unavailable(self.url, exc) from None
            except PoolTimeout as exc:
                raise _unavailable(self.url, exc) from None
        raise AssertionError("unreachable")

    # -- outbox and notification ---------------------------------------------------

    async def reclaim(self) -> None:
        """Nothing: autovacuum makes deleted rows' space reusable, and VACUUM FULL's
        exclusive lock is the operator's call, not a background sweeper's."""

    def listen(self, on_change: TurnChanged) -> None:
        self._listener = Listener(
            self.url, asyncio.get_running_loop(), on_change, self._own_backends
        )
        self._listener.start()

    async def drain_outbox(self, limit: int, publish: Publish) -> int:
        """Take rows (deleted, in a transaction held while they are published) with
        FOR UPDATE SKIP LOCKED: another replica's publisher skips them, and takes them
        over if this one dies or fails to publish (the transaction rolls back, the
        rows come back). One statement takes and deletes them, sent with its BEGIN;
        the COMMIT is asynchronous (decision 430): the delete of rows already
        published needs no WAL flush, a crash that loses it publishes them again,
        which JetStream drops by Nats-Msg-Id, as after a crash before the delete."""
        if self._closed or self._executor is None or self._pool is None:
            return 0
        commits = self._outbox_commits
        if (
            self._quiet is not None
            and self._quiet[1] == commits
            and time.monotonic() - self._quiet[0] < QUIET_FOR
        ):
            return 0  # nothing written here since it was seen empty a moment ago
        pool, loop, executor = self._pool, asyncio.get_running_loop(), self._executor
        try:
            conn, rows = await loop.run_in_executor(executor, _take, pool, limit)
        except PoolTimeout as exc:
            raise _unavailable(self.url, exc) from None
        except psycopg.OperationalError as exc:
            raise _unavailable(self.url, exc) from None
        if conn is None:
            self._quiet = (time.monotonic(), commits)
            return 0
        committed = given_back = False
        try:
            if await publish(rows):
                given_back = True  # by the call, whatever its COMMIT answers
                await loop.run_in_executor(executor, _commit_and_give_back, pool, conn)
                committed = True
                taken = sum(row[4] for row in rows)
                if taken < limit:  # all there was, but for what committed meanwhile
                    self._quiet = (time.monotonic(), commits)
                return taken
            return 0
        except psycopg.OperationalError as exc:
            raise _unavailable(self.url, exc) from None
        finally:
            if not committed:
                self._quiet = None  # its rows come back
            if not given_back:
                await loop.run_in_executor(executor, _give_back, pool, conn)

    def outbox_backlog(self) -> int:
        return stats.outbox_backlog(self.read_conn())

    # -- writes ------------------------------------------------------------------

    @property
    def traced(self) -> bool:
        """Set by the server when tracing is on: each write keeps its caller's trace
        context (Tx.trace)."""
        return self._traced

    @traced.setter
    def traced(self, on: bool) -> None:
        self._traced = on
        if self._writer is not None:
            self._writer.traced = on

    def turn_status(self, turn_id: str) -> TurnStatusRow | None:
        # Other replicas write the same rows: TurnStatus reads the database every time.
        return load_status(self.read_conn(), turn_id)

    async def write(self, fn: Callable[[Tx], T]) -> T:
        return await self._open_writer().write(fn)

    def queue_write(self, fn: Callable[[Tx], T], *, followed: bool = False) -> asyncio.Future[T]:
        return self._open_writer().queue(fn, followed=followed)

    def _open_writer(self) -> GroupWriter:
        if self._closed or self._writer is None:
            raise RuntimeError("database is closed")
        return self._writer

    # -- the writer thread ----------------------------------------------------------

    def _run_group(self, group: list[Job[Any]]) -> None:
        """Run `group` in one transaction, in pipeline mode, and settle every job:
        committed, refused on its own, or (the database away) refused together.

        Statements are sent without waiting for each (psycopg's pipeline mode): an
        operation waits only for the rows it reads, and the group's last statements
        go with its COMMIT. A database error may then surface after the operation
        that caused it, so the group is rolled back and run again *carefully*: each
        operation under a savepoint, the pipeline synced after it, so an error is
        its own. Carefully, an operation the database refuses is rolled back to its
        savepoint alone; one that lost a race with another replica (a deadlock, a
        unique violation from a concurrent insert) has the operations before it
        committed, which lets the winner go on, and runs again first thing in the
        next transaction, after them, so the order holds."""
        outcomes: dict[int, tuple[bool, Any]] = {}
        races: dict[int, int] = {}
        careful = reconnected = False
        commits = 0
        cache = self.turn_cache
        while todo := [job for job in group if id(job) not in outcomes]:
            try:
                conn, pipeline = self._connection()
            except psycopg.OperationalError as exc:
                _fail(outcomes, todo, _unavailable(self.url, exc))
                break
            ran: list[tuple[Job[Any], Any]] = []
            # What the operations that ran announced and whether they wrote outbox rows.
            notes = _Notes()
            current: Job[Any] | None = None
            try:
                for current in todo:
                    if not careful:
                        ran.append((current, self._run_fast(conn, pipeline, current, notes, cache)))
                        continue
                    ok, value = self._run_careful(conn, pipeline, current, notes)
                    if ok:
                        ran.append((current, value))
                    elif not isinstance(value, _RETRIED):
                        outcomes[id(current)] = (False, value)
                    else:
                        # The winner may wait on what this transaction holds: commit
                        # what ran before this one, then run it again.
                        loser, current = current, None
                        self._commit(conn, notes)
                        _commit(outcomes, ran)
                        lost = races[id(loser)] = races.get(id(loser), 0) + 1
                        if lost >= MAX_RUNS:
                            outcomes[id(loser)] = (False, _lost(value))
                        else:
                            # Let the winner finish first (spread out, not in
                            # lockstep with it).
                            time.sleep(0.001 * lost)
                        break
                else:
                    current = None
                    self._commit(conn, notes)
                    cache.commit()
                    _commit(outcomes, ran)
            except _Refused as refusal:
                # Found running fast: run the group again without it (what its
                # operations remembered goes with the rollback; the refusal was
                # reasoned from checked records, `_run_fast`).
                cache.discard()
                self._rollback()
                assert current is not None
                outcomes[id(current)] = (False, refusal.error)
            except psycopg.Error as exc:
                # A statement checking a cached turn record may be what failed (it
                # was stale: `TurnCache`), and a COMMIT cut off leaves the cache's
                # pending records unknown: the cache starts again empty.
                cache.clear()
                if conn.broken or conn.closed:
                    # Nothing of this transaction is acknowledged. A connection that
                    # died with the server since the last group is replaced once,
                    # as a pool would; a COMMIT cut off has an unknown outcome.
                    self._drop_write_conn()
                    if current is not None and not reconnected:
                        reconnected = True
                        continue
                    _fail(outcomes, todo, _unavailable(self.url, exc))
                    break
                self._rollback()
                if not careful:
                    careful = True  # find the operation it belongs to
                    continue
                # Every operation was synced: the transaction itself (its COMMIT)
                # lost a race.
                commits += 1
                if commits < MAX_COMMITS and isinstance(exc, _RETRIED):
                    time.sleep(0.001 * commits)
                    continue
                _fail(outcomes, todo, _lost(exc) if isinstance(exc, _RETRIED) else _refusal(exc))
                break
        settle([(job, *outcomes[id(job)]) for job in group])

    @staticmethod
    def _run_fast(
        conn: psycopg.Connection[Any],
        pipeline: psycopg.Pipeline,
        job: Job[Any],
        notes: _Notes,
        cache: TurnCache,
    ) -> Any:
        """Run `job` without a savepoint or a sync, with the writer's turn records
        (`TurnCache`): its result, or _Refused when it refused itself (a database
        error propagates as it is: a stale record's check is one, so a refusal
        reasoned from a stale record is never given)."""
        tx = PgTx(conn, job.trace, pipeline, cache)
        try:
            value = job.fn(tx)
        except psycopg.Error:
            raise
        except Exception as exc:
            # What the database still owes the group comes first (an earlier
            # operation's error: then it is not this one's refusal).
            pipeline.sync()
            raise _Refused(exc) from None
        job.after = tx._after
        notes.add(tx)
        return value

    @staticmethod
    def _run_careful(
        conn: psycopg.Connection[Any],
        pipeline: psycopg.Pipeline,
        job: Job[Any],
        notes: _Notes,
    ) -> tuple[bool, Any]:
        """Run `job` under a savepoint and sync: (True, its result), or (False, why
        it was refused: a database error of its own, or its own refusal), rolled
        back to the savepoint. A connection that broke propagates."""
        conn.execute("SAVEPOINT op")
        tx = PgTx(conn, job.trace, pipeline)
        error: BaseException
        try:
            value = job.fn(tx)
            pipeline.sync()
        except psycopg.Error as exc:
            if conn.broken or conn.closed:
                raise
            error = exc if isinstance(exc, _RETRIED) else _refusal(exc)
        except Exception as exc:
            error = exc
            try:
                pipeline.sync()  # its statements sent before it refused itself
            except psycopg.Error as db_exc:
                if conn.broken or conn.closed:
                    raise
                error = db_exc if isinstance(db_exc, _RETRIED) else _refusal(db_exc)
        else:
            conn.execute("RELEASE SAVEPOINT op")
            job.after = tx._after
            notes.add(tx)
            return True, value
        _resync(conn, pipeline)
        conn.execute("ROLLBACK TO SAVEPOINT op")
        conn.execute("RELEASE SAVEPOINT op")
        pipeline.sync()
        _forget_prepared(conn, pipeline)
        return False, error

    def _commit(self, conn: psycopg.Connection[Any], notes: _Notes) -> None:
        """Commit what ran, its notification first; count a commit with outbox rows
        before anyone hears of it (`drain_outbox`)."""
        notify(conn, notes.turns)
        conn.commit()
        if notes.outbox:
            self._outbox_commits += 1
        notes.turns.clear()
        notes.outbox = False

    def _connection(self) -> tuple[psycopg.Connection[Any], psycopg.Pipeline]:
        held = self._write_conn
        if held is None or held.conn.closed or held.conn.broken:
            self._drop_write_conn()
            held = self._write_conn = WriteConnection(self.url)
            # Only the live one: a dead backend's pid may be another replica's next.
            self._own_backends.clear()
            self._own_backends.add(held.conn.info.backend_pid)
        return held.conn, held.pipeline

    def _rollback(self) -> None:
        held = self._write_conn
        if held is None or held.conn.closed:
            return
        try:
            _resync(held.conn, held.pipeline)
            held.conn.rollback()
        except psycopg.Error:
            # It broke meanwhile: the next group connects anew.
            self._drop_write_conn()

    def _drop_write_conn(self) -> None:
        held, self._write_conn = self._write_conn, None
        if held is not None:
            held.close()

    def _close_write_conn(self) -> None:
        self._drop_write_conn()


class WriteConnection:
    """The writer thread's connection, in pipeline mode for as long as it lives:
    leaving the mode after each group would cost a round trip of its own (psycopg
    syncs on the way out), and a group's COMMIT already syncs. It sends all of a
    statement however large (store/postgres_pipeline.py)."""

    def __init__(self, url: str) -> None:
        self._held = contextlib.ExitStack()
        # Every statement prepared at its first run (decision 363): PostgreSQL
        # parses and plans each text once per connection, not per statement. At 0,
        # not psycopg's default of 5: a statement prepared at a later run is taken
        # for prepared without its result being checked, and in pipeline mode an
        # earlier statement's error can have skipped its Parse ("prepared statement
        # ... does not exist"); one prepared at its first run is checked. A rollback
        # makes psycopg forget them all (`_forget_prepared`).
        self.conn: psycopg.Connection[Any] = self._held.enter_context(
            SendingConnection.connect(url, prepare_threshold=0, **CONNECTION)
        )
        self.pipeline: psycopg.Pipeline = self._held.enter_context(self.conn.pipeline())

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._held.close()


class _Notes:
    """What a transaction's operations that ran leave for its commit: the turns they
    announced, and whether they wrote outbox rows."""

    __slots__ = ("outbox", "turns")

    def __init__(self) -> None:
        self.turns: list[str] = []
        self.outbox = False

    def add(self, tx: PgTx) -> None:
        self.turns += tx._announced
        self.outbox = self.outbox or tx.conn.wrote_outbox


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


class _Refused(Exception):
    """An operation of a group refused itself (a stale fence, a bad request)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


def _resync(conn: psycopg.Connection[Any], pipeline: psycopg.Pipeline) -> None:
    """Leave a pipeline's aborted state after an error: the server skips every
    statement until a Sync, and psycopg answers those it skipped with
    PipelineAborted. Only a broken connection is an error here."""
    try:
        pipeline.sync()
    except psycopg.Error:
        if conn.broken or conn.closed:
            raise


def _forget_prepared(conn: psycopg.Connection[Any], pipeline: psycopg.Pipeline) -> None:
    """After a ROLLBACK TO SAVEPOINT (synced): deallocate every prepared statement now.

    psycopg forgets its prepared statements when it sees a rollback and deallocates
    them on the server with its next statement, but *after* sending that statement,
    which it prepares anew first: in pipeline mode the DEALLOCATE ALL lands behind
    the new Parse and drops it ("prepared statement ... does not exist"; decision
    266). A statement that is never prepared sends the DEALLOCATE ALL before anything
    is prepared again, and is synced at once: its own result, read later, would make
    psycopg forget (and drop) what was prepared meanwhile. (`Connection.rollback`
    deallocates at once on its own.)"""
    conn.execute("DEALLOCATE ALL", prepare=False)
    pipeline.sync()


# A notification's payload is at most 8000 bytes: the turns of a group go in as
# few as fit (`notify`).
NOTIFY_BYTES = 7900


def notify(conn: psycopg.Connection[Any], turn_ids: list[str]) -> None:
    """One statement for a group's announced turns, before its COMMIT: each turn once,
    as a JSON array in as few notifications as the payload limit allows (decision
    431). A notification per operation cost a statement each, and each is an entry
    in PostgreSQL's queue that every listening replica reads."""
    if not turn_ids:
        return
    payloads: list[str] = []
    chunk: list[str] = []
    size = 2
    for turn_id in dict.fromkeys(turn_ids):
        grows = len(json.dumps(turn_id).encode()) + 1
        if chunk and size + grows > NOTIFY_BYTES:
            payloads.append(json.dumps(chunk, separators=(",", ":")))
            chunk, size = [], 2
        chunk.append(turn_id)
        size += grows
    payloads.append(json.dumps(chunk, separators=(",", ":")))
    conn.execute(
        "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload", (CHANNEL, payloads)
    )


def announced(payload: str) -> list[str]:
    """The turns a notification names: a group's JSON array (`notify`), or one turn
    id as it is (a replica of before decision 431, or an operator's pg_notify)."""
    if payload.startswith('["'):
        with contextlib.suppress(ValueError):
            turns = json.loads(payload)
            if isinstance(turns, list) and all(isinstance(t, str) for t in turns):
                return turns
    return [payload]


def _commit(outcomes: dict[int, tuple[bool, Any]], ran: list[tuple[Job[Any], Any]]) -> None:
    for job, value in ran:
        outcomes[id(job)] = (True, value)
    ran.clear()


def _fail(
    outcomes: dict[int, tuple[bool, Any]], jobs: list[Job[Any]], error: BaseException
) -> None:
    for job in jobs:
        outcomes.setdefault(id(job), (False, error))


def _lost(exc: BaseException) -> Unavailable:
    return Unavailable(
        f"the operation lost {MAX_RUNS} races with concurrent ones in a row "
        f"({type(exc).__name__}); retry it"
    )


def _refusal(exc: psycopg.Error) -> BaseException:
    """What the caller of an operation the database refused is told."""
    if isinstance(exc, psycopg.DataError):
        # JSONB refuses what JSON text allows, e.g. "\\u0000" in a string.
        return InvalidArgument(f"PostgreSQL refused the data written: {exc}")
    if isinstance(exc, psycopg.OperationalError):
        return Unavailable(f"PostgreSQL could not run the write: {exc}")
    return exc


# What a drain takes: its rows, deleted in the transaction held while they are
# published (`drain_outbox`), their locks skipped by other replicas' drains.
TAKE = (
    "DELETE FROM outbox WHERE id IN (SELECT id FROM outbox ORDER BY id LIMIT %s "
    "FOR UPDATE SKIP LOCKED) RETURNING id, subject, payload, traceparent, messages"
)


def _take(
    pool: ConnectionPool[psycopg.Connection[Any]], limit: int
) -> tuple[psycopg.Connection[Any] | None, list[OutboxRow]]:
    """A pooled connection with its transaction open and the rows it took, in id
    order; (None, []) with the connection given back when there were none. One
    round trip: the BEGIN, its synchronous_commit and the statement go together."""
    conn = pool.getconn()
    try:
        with conn.pipeline():
            conn.execute("BEGIN READ WRITE")
            conn.execute("SET LOCAL synchronous_commit = off")
            taken = conn.execute(TAKE, (limit,)).fetchall()
        if not taken:
            conn.rollback()
            pool.putconn(conn)
            return None, []
    except BaseException:
        _give_back(pool, conn)
        raise
    rows = [OutboxRow(int(r[0]), str(r[1]), bytes(r[2]), r[3], int(r[4])) for r in taken]
    rows.sort(key=lambda row: row[0])  # RETURNING keeps no order
    return conn, rows


def _commit_and_give_back(
    pool: ConnectionPool[psycopg.Connection[Any]], conn: psycopg.Connection[Any]
) -> None:
    """The published rows' delete committed, and the connection back: one hop."""
    try:
        conn.commit()
    finally:
        _give_back(pool, conn)


def _give_back(
    pool: ConnectionPool[psycopg.Connection[Any]], conn: psycopg.Connection[Any]
) -> None:
    """Back to the pool, with no transaction open (rows taken and not committed come
    back for the next drain)."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        with contextlib.suppress(psycopg.Error):
            conn.rollback()
    pool.putconn(conn)


class Listener:
    """LISTEN on a connection of its own, in a thread: each notification of another
    replica's wakes the WatchTurn streams of its turn on this replica's loop. Those
    sent by `own` backends (this replica's writer) are skipped: their commits woke
    the streams already, and a second wake costs each stream a read that finds
    nothing new."""

    def __init__(
        self,
        url: str,
        loop: asyncio.AbstractEventLoop,
        on_change: TurnChanged,
        own: set[int] | frozenset[int] = frozenset(),
    ) -> None:
        self.url = url
        self.loop = loop
        self.on_change = on_change
        self.own = own
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
                            if note.pid not in self.own:
                                for turn_id in announced(note.payload):
                                    self._deliver(turn_id)
            except psycopg.Error as exc:
                log.warning("LISTEN connection to PostgreSQL lost (%s); reconnecting", exc)
                self._stop.wait(1.0)


def _unavailable(url: str, exc: BaseException) -> Unavailable:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return Unavailable(f"PostgreSQL at {redact(url)} is unreachable: {detail}")
