"""SQLite access: one writer thread with group commit, one reader on the loop.

turns.db is the main database of every connection and sessions.db is ATTACHed as
`sessions`, so a single writer serialises every change to both files: a fencing
check on a turn (turns.db) and the checkpoint it guards (sessions.db) can never
interleave with a re-drive. Each operation touches one file for its writes, so
each stays atomic even though WAL commits the two files separately.

Writes queue up for the writer thread (store/group_commit.py), which runs
whatever is queued in one `BEGIN IMMEDIATE` transaction, each operation under its own SAVEPOINT (a failed
operation rolls back alone). One fsync then acknowledges the whole group: this is
what lets many concurrent turns outrun an in-process saver that commits each put
behind a lock. A future resolves only after COMMIT returned, so nothing is
acknowledged before it is durable.

Reads run on the event loop's thread on their own connection: they are indexed
point or range lookups, cheaper than a hop to a thread pool, and WAL lets them
proceed while the writer commits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from turnkeeper_server.records import TurnRecord
from turnkeeper_server.store import sqlite_checkpoints
from turnkeeper_server.store.contract import CheckpointRows, Conn, Publish, TurnChanged
from turnkeeper_server.store.group_commit import GroupWriter, Job, settle
from turnkeeper_server.store.lockfile import FileLock
from turnkeeper_server.store.records import OutboxRow, TurnStatusRow
from turnkeeper_server.store.sqlite_schema import SESSIONS_MIGRATIONS, TURNS_MIGRATIONS, migrate
from turnkeeper_server.store.status_cache import (
    CACHED_TURNS,
    StatusCache,
    load_status,
    trigger_statements,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class Tx:
    """What an operation running in the writer thread can use."""

    # One writer thread runs every operation in turn: no row locks needed.
    for_update = ""
    skip_locked = ""
    checkpoints: CheckpointRows = sqlite_checkpoints
    # One writer: the next n ids past sqlite_sequence's (AUTOINCREMENT's high-water
    # mark, never reused) are this row's; its id is the last, and sqlite_sequence
    # moves to it, so the next row's ids come after (store/outbox_rows.py).
    outbox_run_insert = (
        "INSERT INTO main.outbox (id, subject, payload, created_at, traceparent, messages) "
        "VALUES (coalesce((SELECT seq FROM main.sqlite_sequence WHERE name = 'outbox'), 0) "
        "+ ?, ?, ?, ?, ?, ?)"
    )
    # No arrays in SQLite: rows go as multi-row VALUES (store/rows.py).
    array_rows = False
    # The publisher reads the outbox past the last row it published.
    outbox_from_memory = False

    def __init__(self, conn: sqlite3.Connection, trace: str | None = None) -> None:
        self.conn = conn
        self._after: list[Callable[[], None]] = []
        # The W3C traceparent of the call that queued this operation; None unless
        # tracing is on (outbox rows carry it to NATS).
        self.trace = trace

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        return self.conn.execute(sql, params)

    def send(self, sql: str, params: Any = ()) -> None:
        """`execute`: a statement in-process costs no round trip worth holding."""
        self.conn.execute(sql, params)

    def send_outbox(self, sql: str, params: Any, subject: str, payloads: list[bytes]) -> None:
        """`send`: the publisher reads what the one writer committed past its last
        (`outbox_from_memory` is False, so nothing calls this but a caller's test)."""
        self.conn.execute(sql, params).fetchall()

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run `callback` on the event loop once the group is durable."""
        self._after.append(callback)

    def announce(self, turn_ids: Sequence[str]) -> None:
        """Nobody else to tell: one process serves the files."""

    def claim_thread(self, thread_id: str) -> bool:
        """Always: one writer thread runs every operation in turn."""
        return True

    def known_turn(self, turn_id: str) -> TurnRecord | None:
        """None: a row read in-process costs no round trip worth a cache."""
        return None

    def remember_turn(self, turn: TurnRecord) -> None:
        """Nothing kept (`known_turn`)."""

    def forget_turn(self, turn_id: str) -> None:
        """Nothing kept (`known_turn`)."""


def _create_private(path: Path) -> None:
    """Create the file owner-only before SQLite opens it (its -wal and -shm files
    inherit these permissions)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    os.close(fd)


class Database:
    """The SQLite backend of the store contract (store/contract.py)."""

    kind = "sqlite"
    checkpoints: CheckpointRows = sqlite_checkpoints

    def __init__(
        self,
        turns_path: Path,
        sessions_path: Path,
        synchronous: str = "FULL",
        *,
        status_cache_turns: int = CACHED_TURNS,
    ) -> None:
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError(f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous}")
        self.turns_path = turns_path
        self.sessions_path = sessions_path
        self.synchronous = synchronous.upper()
        self._writer: GroupWriter | None = None
        self._reader: sqlite3.Connection | None = None
        self._lock = FileLock(turns_path.with_name(turns_path.name + ".lock"))
        self._closed = False
        # The outbox id the publisher has published through (drain_outbox); the rows
        # up to it may still wait for their delete to commit.
        self._published_through = 0
        # Set by the server when tracing is on: each write keeps its caller's trace
        # context (contextvars do not cross into the writer thread).
        self._traced = False
        # TurnStatus's rows: exact, since every write goes through the writer's
        # connection and its triggers (store/status_cache.py).
        self.status_cache = StatusCache(status_cache_turns) if status_cache_turns > 0 else None

    # -- lifecycle ---------------------------------------------------------------

    def open(self) -> None:
        self.turns_path.parent.mkdir(parents=True, exist_ok=True)
        # Before touching the files: a second service refuses without writing anything.
        self._lock.acquire(f"{self.turns_path}")
        try:
            _create_private(self.turns_path)
            _create_private(self.sessions_path)
            conn = self._connect()
        except BaseException:
            self._lock.release()
            raise
        try:
            conn.execute("BEGIN IMMEDIATE")
            migrate(conn, "main", TURNS_MIGRATIONS)
            migrate(conn, "sessions", SESSIONS_MIGRATIONS)
            conn.execute("COMMIT")
            if self.status_cache is not None:
                self._watch_status(conn)
        except BaseException:
            conn.close()
            self._lock.release()
            raise
        self._reader = self._connect(reader=True)
        self._writer = GroupWriter("turnkeeper-writer", lambda group: self._run_group(conn, group))
        self._writer.traced = self._traced
        self._writer.start(on_exit=conn.close)

    def close(self) -> None:
        """Finish queued writes, then close. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._writer is not None:
            self._writer.stop()
        if self._reader is not None:
            self._reader.close()
        self._lock.release()

    def _connect(self, reader: bool = False) -> sqlite3.Connection:
        # isolation_level=None: we issue BEGIN/COMMIT ourselves (group commit).
        conn = sqlite3.connect(
            self.turns_path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.execute("ATTACH DATABASE ? AS sessions", (str(self.sessions_path),))
        for schema in ("main", "sessions"):
            # Incremental auto-vacuum, so retention can give freed pages back to the
            # file system (retention.py). It takes effect only on a file that has no
            # table yet (a new one); an older file keeps its mode until a VACUUM.
            conn.execute(f"PRAGMA {schema}.auto_vacuum=INCREMENTAL")
            # WAL: readers never block the writer, and a crash never leaves a torn page.
            conn.execute(f"PRAGMA {schema}.journal_mode=WAL")
            # FULL fsyncs the WAL on every commit, so an acknowledged write survives
            # power loss, not only a process crash (NORMAL would only survive the latter).
            conn.execute(f"PRAGMA {schema}.synchronous={self.synchronous}")
        # Wait instead of failing when another process (stock SqliteSaver, a backup)
        # holds a lock for a moment.
        conn.execute("PRAGMA busy_timeout=30000")
        if reader:
            # The reader must never write by mistake: the writer thread owns writes.
            conn.execute("PRAGMA query_only=ON")
        return conn

    def _watch_status(self, conn: sqlite3.Connection) -> None:
        """The writer's triggers that keep `status_cache` exact."""
        assert self.status_cache is not None  # the caller checked
        conn.create_function("turnkeeper_status_touched", 1, self.status_cache.touched)
        for statement in trigger_statements("turnkeeper_status_touched"):
            conn.execute(statement)

    def describe(self) -> str:
        return f"turns {self.turns_path}, sessions {self.sessions_path}"

    # -- reads -------------------------------------------------------------------

    def read_conn(self) -> Conn:
        if self._reader is None:
            raise RuntimeError("database is not open")
        return self._reader

    def turn_status(self, turn_id: str) -> TurnStatusRow | None:
        if self.status_cache is not None:
            return self.status_cache.status(self.read_conn(), turn_id)
        return load_status(self.read_conn(), turn_id)

    async def read(self, fn: Callable[[Conn], T]) -> T:
        # A local file: on the loop's thread, as every SQLite read.
        return self.snapshot(fn)

    def snapshot(self, fn: Callable[[Conn], T]) -> T:
        conn = self.read_conn()
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")

    # -- outbox and notification ---------------------------------------------------

    async def drain_outbox(self, limit: int, publish: Publish) -> int:
        # One writer commits in id order, so the rows past the last one published are
        # exactly those left to publish: no other publisher, no smaller id committing
        # later. `limit` counts messages: rows are stepped through only until it is
        # reached (a row may carry a batch's messages).
        cursor = self.read_conn().execute(
            "SELECT id, subject, payload, traceparent, messages FROM main.outbox "
            "WHERE id > ? ORDER BY id",
            (self._published_through,),
        )
        rows: list[OutboxRow] = []
        taken = 0
        try:
            for row in cursor:
                rows.append(OutboxRow(*row))
                taken += row[4]
                if taken >= limit:
                    break
        finally:
            cursor.close()
        if not rows or not await publish(rows):
            return 0
        last_id = rows[-1][0]
        self._published_through = last_id

        def delete(tx: Tx) -> None:
            tx.execute("DELETE FROM main.outbox WHERE id <= ?", (last_id,))

        # Not awaited: the rows are published (the server's PONG said so), and the
        # next batch is read past them at once. Awaiting the delete's commit held
        # the publisher behind every write queued before it, and the mirror fell
        # behind the journal (bench/ingest.py). A crash before it commits publishes
        # them again at restart, as a crash between publish and delete always could
        # (JetStream drops the copies by Nats-Msg-Id); a delete that fails is made
        # good by the next, which deletes every id up to its own.
        # It rides the next group commit rather than making one (decision 372).
        self._open_writer().ride("outbox-delete", delete).add_done_callback(_log_failed_delete)
        return taken

    def outbox_backlog(self) -> int:
        row = (
            self.read_conn()
            .execute(
                "SELECT coalesce(sum(messages), 0) FROM main.outbox WHERE id > ?",
                (self._published_through,),
            )
            .fetchone()
        )
        return int(row[0])

    async def reclaim(self) -> None:
        def vacuum(tx: Tx) -> None:
            for schema in ("main", "sessions"):
                # Runs to completion only when every row is stepped through.
                tx.execute(f"PRAGMA {schema}.incremental_vacuum").fetchall()

        await self.write(vacuum)

    def listen(self, on_change: TurnChanged) -> None:
        """Every change comes through this process: nothing to listen to."""

    # -- writes ------------------------------------------------------------------

    @property
    def traced(self) -> bool:
        return self._traced

    @traced.setter
    def traced(self, on: bool) -> None:
        self._traced = on
        if self._writer is not None:
            self._writer.traced = on

    async def write(self, fn: Callable[[Tx], T]) -> T:
        """Run `fn` in the writer thread inside a transaction; return once durable."""
        return await self._open_writer().write(fn)

    def queue_write(self, fn: Callable[[Tx], T], *, followed: bool = False) -> asyncio.Future[T]:
        """Queue `fn` for the writer thread now; the future is set once it is durable."""
        return self._open_writer().queue(fn, followed=followed)

    def _open_writer(self) -> GroupWriter:
        if self._closed or self._writer is None:
            raise RuntimeError("database is closed")
        return self._writer

    def _run_group(self, conn: sqlite3.Connection, group: list[Job[Any]]) -> None:
        outcomes: list[tuple[bool, Any]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in group:
                tx = Tx(conn, job.trace)
                conn.execute("SAVEPOINT op")
                try:
                    result = job.fn(tx)
                except Exception as exc:
                    conn.execute("ROLLBACK TO op")
                    conn.execute("RELEASE op")
                    outcomes.append((False, exc))
                else:
                    conn.execute("RELEASE op")
                    job.after = tx._after
                    outcomes.append((True, result))
            conn.execute("COMMIT")
        except Exception as exc:  # the group did not commit: nothing is acknowledged
            log.error("group commit of %d operations failed: %s", len(group), exc)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            self._status_settled()
            settle([(job, False, exc) for job in group])
            return
        self._status_settled()
        settle([(job, ok, value) for job, (ok, value) in zip(group, outcomes, strict=True)])

    def _status_settled(self) -> None:
        # Before the group's futures resolve: no write is acknowledged while a
        # status it changed could still be answered from before it.
        if self.status_cache is not None:
            self.status_cache.settled()


def _log_failed_delete(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.warning("deleting published outbox rows failed (the next delete retries): %s", exc)
