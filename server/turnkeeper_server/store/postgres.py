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

Reads are store/postgres_reads.py's, the outbox drain store/postgres_outbox.py's,
LISTEN/NOTIFY between replicas store/postgres_notify.py's; a connection's settings
and the shared dialect on it are store/postgres_conn.py's.

When the database cannot be reached an operation fails with UNAVAILABLE, saying
so; nothing is acknowledged that did not commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import ConnectionPool

from turnkeeper_server.errors import InvalidArgument, Unavailable
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.store import postgres_checkpoints
from turnkeeper_server.store.contract import CheckpointRows, Conn, Publish, TurnChanged, Tx
from turnkeeper_server.store.group_commit import GroupWriter, Job, settle
from turnkeeper_server.store.postgres_conn import (
    CONNECT_TIMEOUT,
    CONNECTION,
    Ids,
    PgConn,
    redact,
    unavailable,
)
from turnkeeper_server.store.postgres_notify import Listener, notify, payloads
from turnkeeper_server.store.postgres_outbox import OUTBOX_DELETES, PUBLISHED_DELETE, OutboxDrain
from turnkeeper_server.store.postgres_pipeline import SendingConnection
from turnkeeper_server.store.postgres_reads import Reads
from turnkeeper_server.store.postgres_riders import Riders
from turnkeeper_server.store.postgres_schema import migrate
from turnkeeper_server.store.postgres_turn_cache import TurnCache
from turnkeeper_server.store.records import OutboxRow, TurnStatusRow
from turnkeeper_server.store.status_cache import load_status

T = TypeVar("T")


log = logging.getLogger(__name__)

# Connections (and worker threads) per replica for snapshot reads and the outbox
# publisher; writes have the writer's connection.
POOL_SIZE = 8

# Runs of one operation that lost a race before the error is returned.
MAX_RUNS = 8
# Runs of a group whose commit itself lost a race before every operation of it is
# refused.
MAX_COMMITS = 8

_RETRIED = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected, pg_errors.UniqueViolation)


# The advisory-lock class of `claim_thread` (any fixed number; the migrations' lock
# is a one-key lock, a separate space).
THREAD_LOCK = 0x74687264  # "thrd"


class PgTx:
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    # Replicas take outbox ids concurrently: reserving a run of them would serialise
    # every append, so each message keeps a row of its own (store/outbox_rows.py).
    outbox_run_insert = ""
    # An append's rows go as one INSERT a table, arrays unnested (store/rows.py).
    array_rows = True
    # Its rows' ids read back, the writer's replica publishes them (decision 801).
    outbox_from_memory = True
    checkpoints: CheckpointRows = postgres_checkpoints

    def __init__(
        self,
        conn: psycopg.Connection[Any],
        trace: str | None = None,
        pipeline: psycopg.Pipeline | None = None,
        cache: TurnCache | None = None,
        riders: Riders | None = None,
    ) -> None:
        self._conn = PgConn(conn, pipeline, riders)
        # The outbox rows this operation wrote: their ids to read once the group
        # commits, for the drain to publish from memory (decision 801).
        self._outbox: list[Written] = []
        # Whether it deleted outbox rows (erasure, retention): rows it or its group
        # wrote may be gone, so the drain goes back to the table (decision 801).
        self._outbox_deleted = False
        # The writer's turn records, when the group runs fast (`TurnCache`).
        self._cache = cache
        self._after: list[Callable[[], None]] = []
        # The turns this operation announced: the group sends them all in one
        # notification at its commit (`notify`).
        self._announced: list[str] = []
        # Whether it changed the writer's turn records (`TurnCache`).
        self._remembered = False
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
        if sql.startswith(OUTBOX_DELETES) and sql != PUBLISHED_DELETE:
            self._outbox_deleted = True
        return self._conn.execute(sql, params)

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        # Held on the writer's fast path, to go as one statement with the
        # operation's other sends (store/postgres_riders.py).
        self._conn.send(sql, params)

    def after_commit(self, callback: Callable[[], None]) -> None:
        self._after.append(callback)

    def send_outbox(
        self, sql: str, params: Sequence[Any], subject: str, payloads: list[bytes]
    ) -> None:
        # Rides with the operation's other sends; its ids are read after the commit
        # (`PostgresDatabase._commit`).
        ids = self._conn.send_returning(sql, params)
        self._outbox.append(Written(ids, subject, payloads, self.trace))

    def claim_thread(self, thread_id: str) -> bool:
        # A transaction-scoped advisory lock, tried without waiting: two replicas'
        # sweeps each holding some of a thread's turns would otherwise both see the
        # other's (not yet deleted) rows and neither would erase the emptied thread.
        # Keyed (class, hash of the id): a hash collision only defers a thread.
        self._conn.flush()
        self._conn.wrote = True  # the lock lasts until the transaction ends
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
        self._remembered = True
        if self._cache is not None:
            self._cache.put(turn)

    def forget_turn(self, turn_id: str) -> None:
        # Not `_remembered`: a record forgotten by an operation that then refused
        # itself having only read (`_Declined`) costs the next one a read, no more.
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
        self._reads = Reads(url, pool_size)
        self._outbox = OutboxDrain(url)
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
            # (store/postgres_reads.py). No check on checkout (a round trip per read): a read that
            # finds its connection dead with the server runs again on another, and
            # the pool replaces the dead one when it comes back (decision 361).
            # Read-only by default, also outside a transaction (a read of one
            # statement, decision 433); the outbox drain's transaction says READ WRITE,
            # and is the one write here: it commits without waiting for its WAL flush
            # (decision 430), set once per connection, not per drain (decision 611).
            kwargs={
                **CONNECTION,
                "autocommit": True,
                "options": "-c default_transaction_read_only=on -c synchronous_commit=off",
            },
            timeout=CONNECT_TIMEOUT,
            open=False,
            name="turnkeeper",
        )
        self._pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        self._reads.pool = self._pool
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
        self._reads.close()

    # -- reads -------------------------------------------------------------------

    def read_conn(self) -> Conn:
        return self._reads.conn()

    async def read(self, fn: Callable[[Conn], T]) -> T:
        if self._closed or self._executor is None:
            raise RuntimeError("database is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._reads.run, fn)

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
        """The outbox's rows published (store/postgres_outbox.py)."""
        if self._closed or self._executor is None or self._pool is None:
            return 0
        return await self._outbox.drain(
            self._pool, self._executor, limit, publish, self._open_writer().ride
        )

    def outbox_backlog(self) -> int:
        return self._outbox.backlog(self.read_conn())

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
                _fail(outcomes, todo, unavailable(self.url, exc))
                break
            ran: list[tuple[Job[Any], Any]] = []
            # What the operations that ran announced and whether they wrote outbox rows.
            notes = _Notes()
            # The fast path's held sends (store/postgres_riders.py); none carefully.
            notes.riders = None if careful else Riders(conn)
            current: Job[Any] | None = None
            try:
                for current in todo:
                    if not careful:
                        try:
                            value = self._run_fast(conn, pipeline, current, notes, cache)
                        except _Declined as declined:
                            # It only read: the group goes on without it.
                            outcomes[id(current)] = (False, declined.error)
                            continue
                        ran.append((current, value))
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
                    # as a pool would; a COMMIT cut off has an unknown outcome
                    # (its outbox rows, if it committed, are the table's to find).
                    self._drop_write_conn()
                    if current is None:
                        self._outbox.forget()
                    if current is not None and not reconnected:
                        reconnected = True
                        continue
                    _fail(outcomes, todo, unavailable(self.url, exc))
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
        reasoned from a stale record is never given). _Declined when it refused
        itself having only read (plain SELECTs, row locks, no turn record
        remembered; one forgotten stays forgotten): nothing of it is in the
        transaction, which goes on with the group's next operation, not rolled back
        and run again without it (a group of 200 ran 200 operations twice for one
        refusal; decision 670)."""
        tx = PgTx(conn, job.trace, pipeline, cache, notes.riders)
        try:
            value = job.fn(tx)
        except psycopg.Error:
            raise
        except Exception as exc:
            # What the database still owes the group comes first (an earlier
            # operation's error, or a check of a record this refusal was reasoned
            # from: then it is not this one's refusal).
            if notes.riders is not None:
                notes.riders.flush()
            pipeline.sync()
            if not tx.conn.wrote and not tx._remembered:
                raise _Declined(exc) from None
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
        """Commit what ran, its notification first (with the last operation's held
        sends, on the fast path); its outbox rows to the drain before anyone hears of
        it (store/postgres_outbox.py)."""
        if notes.riders is not None:
            notes.riders.flush(payloads(notes.turns))
        else:
            notify(conn, notes.turns)
        conn.commit()
        if notes.outbox_deleted:
            self._outbox.forget()  # what memory holds may be gone: the table's
        elif notes.outbox:
            try:
                rows = [row for written in notes.outbox for row in written.rows()]
            except Exception:  # a bug: the table still has them
                log.exception("reading committed outbox rows' ids failed")
                self._outbox.forget()
            else:
                self._outbox.committed(rows)
        notes.outbox = []
        notes.outbox_deleted = False
        notes.turns.clear()

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
        # An operation's sends go as one statement (store/postgres_riders.py): a text
        # per combination of row counts, more than psycopg's 100 kept by default.
        self.conn.prepared_max = 512
        self.pipeline: psycopg.Pipeline = self._held.enter_context(self.conn.pipeline())

    def close(self) -> None:
        with contextlib.suppress(psycopg.Error):
            self._held.close()


@dataclass(frozen=True, slots=True)
class Written:
    """Outbox rows an operation wrote: their messages, and their ids once the
    statement's result has arrived."""

    ids: Ids
    subject: str
    payloads: list[bytes]
    trace: str | None

    def rows(self) -> list[OutboxRow]:
        return [
            OutboxRow(id_, self.subject, payload, self.trace, 1)
            for id_, payload in zip(self.ids.get(), self.payloads, strict=True)
        ]


class _Notes:
    """What a transaction's operations that ran leave for its commit: the turns they
    announced, and the outbox rows they wrote (published from memory once it
    commits, store/postgres_outbox.py)."""

    __slots__ = ("outbox", "outbox_deleted", "riders", "turns")

    def __init__(self) -> None:
        self.turns: list[str] = []
        self.outbox: list[Written] = []
        self.outbox_deleted = False
        self.riders: Riders | None = None

    def add(self, tx: PgTx) -> None:
        self.turns += tx._announced
        self.outbox += tx._outbox
        self.outbox_deleted = self.outbox_deleted or tx._outbox_deleted


class _Refused(Exception):
    """An operation of a group refused itself (a stale fence, a bad request)."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class _Declined(_Refused):
    """An operation refused itself having written nothing: left out of its group
    without a rollback (`_run_fast`)."""


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
