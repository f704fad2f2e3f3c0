"""The store contract: what the state machine, fencing, re-drive, rewind, boundary
and outbox logic (journal/, messaging/outbox.py) needs from a backend, so that
logic is written once. The store is the service's bottom floor: it imports
nothing above it, and what crosses this contract is typed (store/records.py).

SQL is written in one dialect: `?` placeholders, and tables named by the SQLite
file they live in (`main.turns`, `sessions.checkpoints`). A backend translates
(PostgreSQL: `%s`, one schema). What differs for real lives in the backend's
module: locking (`Tx.for_update`), the writer model, notification, migrations
and the checkpoint tables (each backend keeps its LangGraph saver's own schema).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

from turnkeeper_server.records import TurnRecord
from turnkeeper_server.store.records import (
    Boundary,
    CheckpointPut,
    CheckpointQuery,
    CheckpointRow,
    OutboxRow,
    TurnStatusRow,
    WritesPut,
)

T = TypeVar("T")

Publish = Callable[[list[OutboxRow]], Awaitable[bool]]
# Called with a turn_id changed through another replica, or None: "any turn may
# have changed" (notifications may have been missed).
TurnChanged = Callable[[str | None], None]

# Set by a caller that pipelines writes (a checkpoint stream's batch): the store
# calls it as soon as a write is queued (writes run one after another in the order
# they were queued), so the caller may queue the next one right behind it without
# waiting for its commit.
WRITE_QUEUED: ContextVar[Callable[[], None] | None] = ContextVar("write_queued", default=None)
# Set with it when the same caller queues another write right after this one: the
# store's writer may wait a moment for it, to commit both at once.
WRITE_FOLLOWED: ContextVar[bool] = ContextVar("write_followed", default=False)


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Conn(Protocol):
    """A connection as the shared logic uses it (sqlite3.Connection satisfies it)."""

    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Any: ...

    def executemany(self, sql: str, seq_of_parameters: Iterable[Sequence[Any]], /) -> Any: ...


class CheckpointRows(Protocol):
    """A backend's checkpoint tables: `sqlite_checkpoints` (langgraph-checkpoint-sqlite's
    schema) or `postgres_checkpoints` (langgraph-checkpoint-postgres's). Each is a
    module of functions; mypy checks it against this protocol where the backend
    names it as its `checkpoints`."""

    def put(self, tx: Tx, put: CheckpointPut, boundary: Boundary | None) -> None:
        """Store the checkpoint (replacing one with the same id) and, for a turn's
        checkpoint, its boundary."""
        ...

    def put_writes(self, tx: Tx, writes: WritesPut) -> None: ...

    def get(
        self, conn: Conn, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> CheckpointRow | None:
        """The checkpoint with its pending writes; the namespace's newest when
        `checkpoint_id` is ""."""
        ...

    def list_(self, conn: Conn, query: CheckpointQuery) -> Iterator[CheckpointRow]:
        """Newest first."""
        ...

    def delete_thread(self, tx: Tx, thread_id: str) -> None:
        """Every checkpoint, write and boundary of the thread."""
        ...

    def delete_checkpoint(self, tx: Tx, thread_id: str, ns: str, checkpoint_id: str) -> int:
        """One checkpoint, its writes and its boundary rows; 1 if it existed."""
        ...

    def namespaces(self, tx: Tx, thread_id: str) -> list[tuple[str, str]]:
        """(namespace, newest checkpoint id) of each namespace of the thread."""
        ...

    def prune_namespace(self, tx: Tx, thread_id: str, ns: str, keep: str | None) -> int:
        """Delete the namespace's checkpoints older than `keep` (all when None), with
        their writes and boundaries; how many checkpoints went."""
        ...

    def checkpoints_of_runs(self, tx: Tx, run_id: str) -> list[tuple[str, str, str]]:
        """(thread, namespace, id) of the checkpoints whose metadata names `run_id`."""
        ...

    def copy_thread(self, tx: Tx, source: str, target: str) -> int:
        """Every checkpoint and write of `source` under `target`, same ids."""
        ...


class Tx(Protocol):
    """One operation's transaction."""

    @property
    def conn(self) -> Conn: ...

    # Appended to a SELECT of turn rows an operation is about to change: a row lock
    # on PostgreSQL (replicas run operations concurrently), nothing on SQLite (one
    # writer thread runs them one after another).
    for_update: str
    # The same for the reaper's scan: rows another replica is re-driving are skipped.
    skip_locked: str
    # The W3C traceparent of the call that queued the operation (tracing on only),
    # kept on the outbox rows it writes.
    trace: str | None
    # The INSERT of one outbox row carrying a run of n messages, parameters (n,
    # subject, payload, created_at, traceparent, n), where the backend can reserve n
    # ids at once (SQLite's one writer); "" where it cannot (store/outbox_rows.py).
    outbox_run_insert: str
    # Whether many rows go as one INSERT of one array a column (PostgreSQL's
    # `unnest`) where the caller names the columns' types (store/rows.py).
    array_rows: bool
    # Whether the backend publishes the outbox rows an operation wrote from memory
    # once they commit (PostgreSQL's writer, decision 801): they go by `send_outbox`.
    outbox_from_memory: bool

    @property
    def checkpoints(self) -> CheckpointRows:
        """The backend's checkpoint rows (as `Store.checkpoints`): the journal's
        checkpoint writes, rollback, erasure and pruning go through it."""
        ...

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any: ...

    def send(self, sql: str, params: Sequence[Any] = ()) -> None:
        """`execute` for a write whose answer nobody reads: an INSERT, or a check that
        raises unless the database holds what it checks. Sent in the order made, but
        PostgreSQL's writer may send it together with the operation's next sends,
        as one statement (store/postgres_riders.py); a check's error may then stand
        for the statement the sends went in, and the group runs again carefully."""
        ...

    def after_commit(self, callback: Callable[[], None]) -> None: ...

    def send_outbox(
        self, sql: str, params: Sequence[Any], subject: str, payloads: list[bytes]
    ) -> None:
        """`send` for an INSERT of outbox rows, one a message of `payloads` in order,
        ending in `RETURNING id`, where `outbox_from_memory`: the backend reads their
        ids back and publishes the rows once the transaction commits."""
        ...

    def announce(self, turn_ids: Sequence[str]) -> None:
        """Tell other replicas, when this commits, that these turns changed."""
        ...

    def claim_thread(self, thread_id: str) -> bool:
        """Whether this transaction alone works on the thread until it commits; False
        when another replica's transaction holds it (PostgreSQL; never waits). The
        turn horizon takes a thread's turns only under a claim."""
        ...

    def known_turn(self, turn_id: str) -> TurnRecord | None:
        """The turn as this writer's own committed writes left it, where the backend
        keeps such a cache (PostgreSQL's writer, decision 470); None where it does not
        (SQLite, and a PostgreSQL group run carefully). Only its attempts, state,
        last_seq and rewinds (and the fixed turn_id, thread_id) may be relied on, and
        only after the operation sent a statement that fails unless the row still
        holds them (journal/transitions.py's `fenced_turn`): the cache may be stale
        (another replica wrote the turn), and then that statement rolls the group
        back, which runs again without the cache."""
        ...

    def remember_turn(self, turn: TurnRecord) -> None:
        """The turn's attempts, state, last_seq and rewinds as this operation leaves
        them, for `known_turn` once it commits (nothing where no cache is kept)."""
        ...

    def forget_turn(self, turn_id: str) -> None:
        """This operation changes the turn in ways `remember_turn` does not say."""
        ...


class Store(Protocol):
    """A backend: where turns, events, the outbox and checkpoints are kept."""

    @property
    def kind(self) -> str:
        """ "sqlite" or "postgres"."""
        ...

    # Set when tracing is on: each write keeps its caller's trace context (Tx.trace).
    traced: bool

    @property
    def checkpoints(self) -> CheckpointRows:
        """The backend's checkpoint rows, for reads (`Store.read`)."""
        ...

    def open(self) -> None: ...

    def close(self) -> None: ...

    async def write(self, fn: Callable[[Tx], T]) -> T:
        """Run `fn` in a transaction (shared with the writes queued beside it: group
        commit, store/group_commit.py); return once it is durable. After-commit
        callbacks run on the caller's loop before the result is delivered. Writes
        run in the order they were queued, one after another."""
        ...

    def queue_write(self, fn: Callable[[Tx], T], *, followed: bool = False) -> asyncio.Future[T]:
        """Queue `fn` behind every write queued before it, now, and return the
        future of its result, set once it is durable (as `write`'s). `followed`: the caller queues another write right after this
        one (WRITE_FOLLOWED). A caller that pipelines writes this way needs no task
        per write and no WRITE_QUEUED hook."""
        ...

    def turn_status(self, turn_id: str) -> TurnStatusRow | None:
        """TurnStatus's columns of one turn, on the event loop's thread: from a cache
        kept exact by the store's own writes where one process writes (SQLite,
        store/status_cache.py), else read each time."""
        ...

    def read_conn(self) -> Conn:
        """A connection for reads on the event loop's thread."""
        ...

    async def read(self, fn: Callable[[Conn], T]) -> T:
        """Run `fn`'s reads as one consistent snapshot, off the event loop where the
        database is across a network (PostgreSQL); for reads that may be large or
        that must agree with each other (checkpoints, WatchTurn's turn and events)."""
        ...

    async def drain_outbox(self, limit: int, publish: Publish) -> int:
        """Hand outbox rows, in id order, to `publish`, as many as carry about
        `limit` messages (at least one row, however many it carries); delete those
        it confirms (True). Returns how many messages it confirmed. Rows another replica is
        publishing at that moment are not handed out twice. A confirmed row is
        never handed out again by this store, though its delete may commit after
        this returns (SQLite: it joins the writer's next group)."""
        ...

    def outbox_backlog(self) -> int:
        """How many outbox messages are left to publish (the shutdown log)."""
        ...

    async def reclaim(self) -> None:
        """Give the space of deleted rows back after a retention pass, where the
        backend does that on request."""
        ...

    def listen(self, on_change: TurnChanged) -> None:
        """Call `on_change` on this loop for turns changed through other replicas."""
        ...

    def describe(self) -> str:
        """Where the data lives, for the startup log line (no secrets)."""
        ...
