"""The turn state machine (docs/architecture.md §2-§5), as operations run in one
transaction each (the SQLite writer thread, or a PostgreSQL connection: store/contract.py).

Every function here takes a `Tx` and either completes its compare-and-set or raises
a domain error, leaving nothing behind (the operation is rolled back alone).
Outbox rows for NATS are written in the same transaction as the change they mirror.

    StartTurn -> RUNNING --park--> PARKED --ResumeDetached--> RUNNING
                 RUNNING --finish--> DONE | FAILED

StartTurn itself, with its multitask strategy and deadlines, is `start`; cancel,
the thread's queue and the deadlines are `lifecycle`; re-drives of orphaned turns
(RUNNING -> RUNNING with attempts+1 and a rewind, or FAILED at the cap) are
`redrive`. All are built on the reads, the fence and the writers here.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from turnkeeper_server.errors import InvalidArgument, NotFound, StaleAttempt, WrongState
from turnkeeper_server.journal import webhooks
from turnkeeper_server.records import (
    CANCELLED,
    DONE,
    EVENT_COLUMNS,
    FAILED,
    HANDED,
    PARKED,
    REOFFERED,
    RUNNING,
    TERMINAL_EVENTS,
    TURN_COLUMNS,
    EventRecord,
    NewEvent,
    Policy,
    TurnRecord,
)
from turnkeeper_server.store.contract import Conn, Tx
from turnkeeper_server.store.outbox_rows import write_messages
from turnkeeper_server.store.rows import insert_rows

# -- reads (usable on any connection) -----------------------------------------------


def load_turn(conn: Conn, turn_id: str) -> TurnRecord | None:
    row = conn.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE turn_id = ?", (turn_id,)
    ).fetchone()
    return TurnRecord(*row) if row else None


def require_turn(conn: Conn, turn_id: str) -> TurnRecord:
    turn = load_turn(conn, turn_id)
    if turn is None:
        raise NotFound(f"turn {turn_id!r} is not in the journal")
    return turn


def load_events(conn: Conn, turn_id: str, after_seq: int, limit: int) -> list[EventRecord]:
    rows = conn.execute(
        f"SELECT {EVENT_COLUMNS} FROM main.events WHERE turn_id = ? AND seq > ? "
        "ORDER BY seq LIMIT ?",
        (turn_id, after_seq, limit),
    ).fetchall()
    return [EventRecord(*r) for r in rows]


def latest_boundary(conn: Conn, turn_id: str) -> tuple[str, int]:
    """(checkpoint_id, last_seq) of the turn's newest root checkpoint; ("", 0) if none."""
    row = conn.execute(
        "SELECT checkpoint_id, last_seq FROM sessions.turnkeeper_boundaries "
        "WHERE turn_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1",
        (turn_id,),
    ).fetchone()
    return (row[0], row[1]) if row else ("", 0)


def claim_start(conn: Conn, turn_id: str, thread_id: str) -> tuple[str, bool]:
    """Where a claimed turn continues from, in one statement: the checkpoint_id of the
    turn's newest root checkpoint ("" if none), and whether its thread has no root
    checkpoint at all (decision 480)."""
    row = conn.execute(
        "SELECT (SELECT checkpoint_id FROM sessions.turnkeeper_boundaries "
        "WHERE turn_id = ? AND checkpoint_ns = '' ORDER BY checkpoint_id DESC LIMIT 1), "
        "EXISTS (SELECT 1 FROM sessions.checkpoints WHERE thread_id = ? AND checkpoint_ns = '')",
        (turn_id, thread_id),
    ).fetchone()
    checkpoint_id = (row[0] if row else None) or ""
    return checkpoint_id, not checkpoint_id and not (row and row[1])


def lock_turn(tx: Tx, turn_id: str) -> TurnRecord:
    """`require_turn` for a turn the operation is about to change: row-locked where
    operations run concurrently (PostgreSQL replicas), so no other operation on the
    turn can slip between this read and the write that follows it."""
    row = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE turn_id = ?{tx.for_update}", (turn_id,)
    ).fetchone()
    if row is None:
        raise NotFound(f"turn {turn_id!r} is not in the journal")
    # What the operation does next to the turn, the writer's record of it does not
    # know (an operation that says, `remember_turn`s it after).
    tx.forget_turn(turn_id)
    return TurnRecord(*row)


# The check of a turn record the writer remembered (`fenced_turn`): an error, which
# rolls the group back, unless the row still holds those values; it locks the row
# as `lock_turn` does, and nobody waits for its answer before the group's COMMIT.
_STILL = (
    "SELECT 1 / count(*) FROM (SELECT 1 FROM main.turns WHERE turn_id = ? AND thread_id = ? "
    "AND attempts = ? AND state = ? AND last_seq = ? AND rewinds = ? AND effects = ?{lock}) "
    "AS still"
)


# `_STILL` and the append's move of last_seq in one statement (`_moved_as_remembered`):
# the update takes the row lock and changes the row only if it holds the record's
# values, and divides by zero otherwise. PostgreSQL's alone: only its writer
# remembers turns.
_STILL_AND_MOVED = (
    "WITH moved AS (UPDATE main.turns SET last_seq = ?, updated_at = ? WHERE turn_id = ? "
    "AND thread_id = ? AND attempts = ? AND state = ? AND last_seq = ? AND rewinds = ? "
    "AND effects = ? RETURNING 1) SELECT 1 / count(*) FROM moved"
)


# `_STILL` and the take of a handed turn (`taken`) in one statement, for the first
# fenced write of a turn whose start the writer remembers (decision 662): the update
# takes the row lock and clears the mark only if the row holds the record's values
# and its hand-off is still the one it was started with, and divides by zero
# otherwise (a hand-off offered again, or taken over, meanwhile).
_STILL_AND_TAKEN = (
    "WITH took AS (UPDATE main.turns SET handed = 0 WHERE turn_id = ? AND thread_id = ? "
    "AND attempts = ? AND state = ? AND last_seq = ? AND rewinds = ? AND effects = ? "
    f"AND handed = {HANDED} RETURNING 1) SELECT 1 / count(*) FROM took"
)


def _moved_as_remembered(
    tx: Tx, turn_id: str, attempt: int, events: Sequence[NewEvent]
) -> tuple[TurnRecord, float] | None:
    """For an append of new events right after the last_seq of a turn the writer
    remembers (the usual one, decision 511): its record's check and its last_seq's
    move sent as one statement, unawaited, in place of `fenced_turn`'s check and
    `update_turn`; the record and the time written. None when the append is another
    (a resend, a gap, a turn not remembered): it goes the way of every write."""
    turn = tx.known_turn(turn_id)
    if turn is None or turn.state != RUNNING or turn.attempts != attempt or not events:
        return None
    if turn.handed:
        return None  # its first fenced write takes it (`fenced_turn`)
    if any(seq != turn.last_seq + i for i, (seq, _, _) in enumerate(events, 1)):
        return None
    if any(type_ in TERMINAL_EVENTS for _, type_, _ in events):
        return None  # refused by `_append`, from a checked record
    now = time.time()
    tx.send(
        _STILL_AND_MOVED,
        (
            events[-1][0],
            now,
            turn_id,
            turn.thread_id,
            attempt,
            RUNNING,
            turn.last_seq,
            turn.rewinds,
            turn.effects,
        ),
    )
    return turn, now


def fenced_turn(tx: Tx, turn_id: str, attempt: int, thread_id: str = "") -> TurnRecord:
    """`lock_turn` and `fence` for a write of a running turn's current attempt (an
    append, a checkpoint), without reading the row where the writer remembers it
    (PostgreSQL, decision 470): the record it committed last is used as it is and
    checked by a statement sent with the operation's others, which fails the group
    if the row holds another attempt, state, last_seq, rewinds or effects (decision
    510); the group then runs again reading the row. Only those columns (and turn_id, thread_id) of the
    result may be relied on. A record that would not pass the fence is not used: a
    refusal is reasoned from the row itself. With `thread_id`, a turn of another
    thread is refused first."""
    turn = tx.known_turn(turn_id)
    if turn is not None and turn.state == RUNNING and turn.attempts == attempt:
        still = (turn_id, turn.thread_id, attempt, RUNNING, turn.last_seq, turn.rewinds)
        if turn.handed == HANDED:
            # Remembered from its start (decision 662): checked and taken at once.
            tx.send(_STILL_AND_TAKEN, (*still, turn.effects))
            turn = dataclasses.replace(turn, handed=0)
        elif turn.handed:
            turn = lock_turn(tx, turn_id)  # not remembered so; refused from the row
        else:
            tx.send(_STILL.format(lock=tx.for_update), (*still, turn.effects))
    else:
        turn = lock_turn(tx, turn_id)
    if thread_id and turn.thread_id != thread_id:
        raise WrongState(f"turn {turn_id!r} runs on thread {turn.thread_id!r}, not {thread_id!r}")
    fence(turn, attempt)
    return taken(tx, turn)


def taken(tx: Tx, turn: TurnRecord) -> TurnRecord:
    """A turn whose claim rode its hand-off is taken by its owner's first heartbeat
    or fenced write (decision 590): from then on a lapsed lease is a crash, not a
    hand-off that never arrived. Called after `fence`, which refused the write of
    an execution whose hand-off was offered again untaken."""
    if turn.handed != HANDED:
        return turn
    tx.execute("UPDATE main.turns SET handed = 0 WHERE turn_id = ?", (turn.turn_id,))
    return dataclasses.replace(turn, handed=0)


def thread_agents(conn: Conn, thread_id: str) -> set[str]:
    """The agents with turns on a thread (who the thread belongs to, for auth.py)."""
    rows = conn.execute(
        "SELECT DISTINCT agent FROM main.turns WHERE thread_id = ?", (thread_id,)
    ).fetchall()
    return {r[0] for r in rows}


def list_turns(
    conn: Conn,
    *,
    state: str | None,
    agent: str,
    thread_id: str,
    before_rowid: int | None,
    limit: int,
) -> list[tuple[int, TurnRecord]]:
    where: list[str] = []
    params: list[object] = []
    if state:
        where.append("state = ?")
        params.append(state)
    if agent:
        where.append("agent = ?")
        params.append(agent)
    if thread_id:
        where.append("thread_id = ?")
        params.append(thread_id)
    if before_rowid is not None:
        where.append("rowid < ?")
        params.append(before_rowid)
    sql = f"SELECT rowid, {TURN_COLUMNS} FROM main.turns"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY rowid DESC LIMIT ?"
    rows = conn.execute(sql, (*params, limit)).fetchall()
    return [(r[0], TurnRecord(*r[1:])) for r in rows]


# -- helpers -------------------------------------------------------------------------

# The state each terminal event ends its turn in (a run's webhook says which).
_ENDS_IN: Final = {"turn.done": DONE, "turn.failed": FAILED, "turn.cancelled": CANCELLED}


_EVENTS_INSERT = "INSERT INTO main.events (turn_id, seq, attempt, type, data_json, created_at)"
# Its columns' types, for a backend that inserts rows as arrays (store/rows.py).
_EVENTS_TYPES = ("text", "bigint", "integer", "text", "text", "double precision")


def write_outbox(tx: Tx, subject: str, payload: str, now: float) -> None:
    write_messages(tx, subject, [payload.encode()], now)


def _payload_head(turn: TurnRecord) -> str:
    """The start of every NATS payload of a turn's events (computed once per batch)."""
    return f'{{"turn_id":{json.dumps(turn.turn_id)},"thread_id":{json.dumps(turn.thread_id)},'


def _event_payload(
    turn: TurnRecord, seq: int, attempt: int, type_: str, data_json: str, head: str = ""
) -> str:
    # data_json was validated as JSON on the way in; embed it without re-parsing.
    return (
        f"{head or _payload_head(turn)}"
        f'"seq":{seq},"attempt":{attempt},"type":{json.dumps(type_)},"data":{data_json}}}'
    )


def fence(turn: TurnRecord, attempt: int) -> None:
    """Refuse a write from an execution that is not the turn's current one."""
    if turn.state == CANCELLED:
        # ABORTED like a re-driven attempt: the execution must stop, not retry.
        raise StaleAttempt(f"turn {turn.turn_id!r} was cancelled; this execution must stop")
    if attempt != turn.attempts:
        raise StaleAttempt(
            f"turn {turn.turn_id!r}: attempt {attempt} was re-driven away; "
            f"the current attempt is {turn.attempts}"
        )
    if turn.state != RUNNING:
        raise WrongState(f"turn {turn.turn_id!r} is {turn.state}, not RUNNING")
    if turn.handed == REOFFERED:
        # Its claim rode a hand-off that was not taken within the claim window, and
        # the turn was offered again: the execution that hand-off started late is
        # stale; the next claim takes the turn with a new attempt (decision 590).
        raise StaleAttempt(
            f"turn {turn.turn_id!r}: the hand-off of attempt {attempt} was offered again "
            "untaken; this execution must stop"
        )


def _fence_owner(turn: TurnRecord, replica: str, incarnation: str) -> None:
    if (turn.owner_replica, turn.owner_incarnation) != (replica, incarnation):
        owner = f"{turn.owner_replica}/{turn.owner_incarnation}" if turn.owned else "nobody"
        raise StaleAttempt(
            f"turn {turn.turn_id!r} is owned by {owner}, not {replica}/{incarnation}"
        )


def update_turn(tx: Tx, turn_id: str, now: float, **columns: object) -> None:
    sets = ", ".join(f"{name} = ?" for name in columns)
    tx.execute(
        f"UPDATE main.turns SET {sets}, updated_at = ? WHERE turn_id = ?",
        (*columns.values(), now, turn_id),
    )


def _append(
    tx: Tx,
    turn: TurnRecord,
    attempt: int,
    events: Sequence[NewEvent],
    policy: Policy,
    now: float,
    terminal: tuple[str, str] | None = None,
) -> int:
    """Insert events continuing turn.last_seq; returns the new last_seq.

    Idempotent by (attempt, seq): an event already stored with the same attempt,
    type and data is skipped, so an executor may resend a batch it is unsure of.
    A finish's `terminal` event (type, data_json) goes last, in the same rows: on
    PostgreSQL the batch and its outbox rows are one statement (decision 781).
    """
    last = turn.last_seq
    subject = policy.events_subject(turn.turn_id)
    head = _payload_head(turn)
    turn_id = turn.turn_id
    types_json: dict[str, str] = {}
    # The events' rows flattened, for one multi-row INSERT (store/rows.py):
    # executemany's step per row waited for the GIL each time (bench/ingest.py); their
    # NATS payloads, for as few outbox rows as the backend allows (store/outbox_rows.py).
    rows: list[object] = []
    payloads: list[bytes] = []

    def flush() -> None:
        if rows:
            insert_rows(tx, _EVENTS_INSERT, 6, rows, types=_EVENTS_TYPES)
            write_messages(tx, subject, payloads, now)
            rows.clear()
            payloads.clear()

    for seq, type_, data_json in events:
        if type_ in TERMINAL_EVENTS:
            raise InvalidArgument(
                f"event type {type_!r} is written by the service (FinishTurn), not appended"
            )
        if seq <= last:
            flush()  # the stored event may be one of this very batch
            row = tx.execute(
                "SELECT attempt, type, data_json FROM main.events WHERE turn_id = ? AND seq = ?",
                (turn.turn_id, seq),
            ).fetchone()
            if row is not None and tuple(row) == (attempt, type_, data_json):
                continue
            raise WrongState(
                f"turn {turn.turn_id!r}: seq {seq} already holds a different event; "
                f"the next seq is {last + 1}"
            )
        if seq != last + 1:
            raise WrongState(
                f"turn {turn.turn_id!r}: seq {seq} leaves a gap; the next seq is {last + 1}"
            )
        rows += (turn_id, seq, attempt, type_, data_json, now)
        # _event_payload's text, inline: the call and json.dumps of the type per event
        # were a third of this loop (bench/ingest.py).
        type_json = types_json.get(type_)
        if type_json is None:
            type_json = types_json[type_] = json.dumps(type_)
        payloads.append(
            f'{head}"seq":{seq},"attempt":{attempt},"type":{type_json},'
            f'"data":{data_json}}}'.encode()
        )
        last = seq
    if terminal is not None:
        type_, data_json = terminal
        last += 1
        rows += (turn_id, last, attempt, type_, data_json, now)
        payloads.append(_event_payload(turn, last, attempt, type_, data_json, head).encode())
    flush()
    return last


def append_terminal(
    tx: Tx,
    turn: TurnRecord,
    last_seq: int,
    type_: str,
    data: dict[str, object],
    policy: Policy,
    now: float,
) -> int:
    """The turn's terminal event (turn.done, turn.failed, turn.cancelled) after
    `last_seq`, with its outbox message: the one writer of terminal events, which
    only the service writes (decision 2). Returns its seq. The run's webhook, if it
    has one, becomes due in the same transaction (journal/webhooks.py)."""
    return append_terminal_record(tx, turn, last_seq, type_, data, policy, now).seq


def append_terminal_record(
    tx: Tx,
    turn: TurnRecord,
    last_seq: int,
    type_: str,
    data: dict[str, object],
    policy: Policy,
    now: float,
) -> EventRecord:
    """`append_terminal`, returning the event it stored."""
    data_json = json.dumps(data)
    # `_append`'s rows, the terminal event alone in them: its INSERT and its outbox
    # row are unread writes, one statement on PostgreSQL (decision 781).
    after = turn if turn.last_seq == last_seq else dataclasses.replace(turn, last_seq=last_seq)
    seq = _append(tx, after, turn.attempts, (), policy, now, terminal=(type_, data_json))
    webhooks.run_ended(tx, turn.turn_id, _ENDS_IN[type_], now)
    return EventRecord(turn.turn_id, seq, turn.attempts, type_, data_json, now)


def append_service_events(
    tx: Tx, turn: TurnRecord, events: Sequence[tuple[str, str]], policy: Policy, now: float
) -> int:
    """Events the service writes into a running turn's stream on its own account
    (an effect superseded: journal/effects.py), as (type, data_json), after its
    last_seq and under its current attempt; returns the new last_seq."""
    numbered = [(turn.last_seq + k, type_, data) for k, (type_, data) in enumerate(events, 1)]
    last = _append(tx, turn, turn.attempts, numbered, policy, now)
    if last != turn.last_seq:
        update_turn(tx, turn.turn_id, now, last_seq=last)
    return last


def reload_turn(tx: Tx, turn_id: str) -> TurnRecord:
    return require_turn(tx.conn, turn_id)


# -- transitions ---------------------------------------------------------------------


def heartbeat(
    tx: Tx, *, turn_id: str, attempt: int, replica: str, incarnation: str, policy: Policy
) -> float:
    turn = lock_turn(tx, turn_id)
    fence(turn, attempt)
    _fence_owner(turn, replica, incarnation)
    turn = taken(tx, turn)
    now = time.time()
    lease = now + policy.lease_seconds
    update_turn(tx, turn_id, now, lease_expires_at=lease)
    tx.remember_turn(turn)  # a lease changes no column `fenced_turn` relies on
    return lease


def append_events(
    tx: Tx, *, turn_id: str, attempt: int, events: Sequence[NewEvent], policy: Policy
) -> int:
    return append_events_written(
        tx, turn_id=turn_id, attempt=attempt, events=events, policy=policy
    ).last_seq


@dataclass(frozen=True, slots=True)
class Written:
    """What an append committed: the turn's last_seq after it, its rewinds (the
    epoch the events belong to) and the events it stored, in seq order (those an
    idempotent resend skipped are not among them), by `attempt` at `created_at`."""

    last_seq: int
    rewinds: int
    turn_id: str
    attempt: int
    created_at: float
    new: tuple[NewEvent, ...]

    def records(self) -> tuple[EventRecord, ...]:
        return tuple(
            EventRecord(self.turn_id, seq, self.attempt, type_, data_json, self.created_at)
            for seq, type_, data_json in self.new
        )


def append_events_written(
    tx: Tx, *, turn_id: str, attempt: int, events: Sequence[NewEvent], policy: Policy
) -> Written:
    """`append_events`, saying what it stored (a follower serves those from memory,
    engine/watch.py)."""
    moved = _moved_as_remembered(tx, turn_id, attempt, events)
    if moved is not None:
        turn, now = moved
        _append(tx, turn, attempt, events, policy, now)
        tx.remember_turn(dataclasses.replace(turn, last_seq=events[-1][0], updated_at=now))
        return Written(events[-1][0], turn.rewinds, turn_id, attempt, now, tuple(events))
    turn = fenced_turn(tx, turn_id, attempt)
    now = time.time()
    last = _append(tx, turn, attempt, events, policy, now)
    if last != turn.last_seq:
        update_turn(tx, turn_id, now, last_seq=last)
        tx.remember_turn(dataclasses.replace(turn, last_seq=last, updated_at=now))
    else:
        tx.remember_turn(turn)
    # _append stored exactly the events after the turn's last_seq (a gap raises).
    new = tuple(e for e in events if e[0] > turn.last_seq)
    return Written(last, turn.rewinds, turn_id, attempt, now, new)


@dataclass(frozen=True, slots=True)
class Closed:
    """What a finish or a park committed: the turn as it stands after it (DONE,
    FAILED or PARKED, its last_seq and rewinds) and the events that commit stored, in
    seq order (the executor's last ones an idempotent resend did not skip, then a
    finish's terminal event). A follower serves them from memory (engine/watch.py)."""

    turn: TurnRecord
    events: tuple[EventRecord, ...]


def park_turn(
    tx: Tx,
    *,
    turn_id: str,
    attempt: int,
    interrupt_json: str,
    events: Sequence[NewEvent],
    policy: Policy,
) -> Closed:
    """Park the turn; what it stored (the turn as it left it, its events)."""
    turn = lock_turn(tx, turn_id)
    fence(turn, attempt)
    turn = taken(tx, turn)
    now = time.time()
    last = _append(tx, turn, attempt, events, policy, now)
    # Parking publishes no terminal event: the turn is paused, not over. Its run is
    # (LangGraph's `success`): its webhook is due.
    webhooks.run_ended(tx, turn_id, PARKED, now)
    update_turn(
        tx,
        turn_id,
        now,
        state=PARKED,
        last_seq=last,
        interrupt_json=interrupt_json,
        resume_json=None,
        owner_replica=None,
        owner_incarnation=None,
        lease_expires_at=None,
    )
    return Closed(reload_turn(tx, turn_id), _stored(turn, attempt, events, now))


def finish_turn(
    tx: Tx,
    *,
    turn_id: str,
    attempt: int,
    failed: bool,
    error: str,
    events: Sequence[NewEvent],
    policy: Policy,
) -> Closed:
    """Finish the turn; what it stored (the turn as it left it, its events)."""
    turn = lock_turn(tx, turn_id)
    fence(turn, attempt)
    turn = taken(tx, turn)
    now = time.time()
    # The terminal event in the rows of the executor's last events (decision 781):
    # `append_terminal_record`'s event, outbox message and webhook, with no
    # statements of its own for the event and its message.
    type_ = "turn.failed" if failed else "turn.done"
    data_json = json.dumps({"error": error} if error else {})
    last = _append(tx, turn, attempt, events, policy, now, terminal=(type_, data_json))
    webhooks.run_ended(tx, turn_id, _ENDS_IN[type_], now)
    terminal = EventRecord(turn_id, last, turn.attempts, type_, data_json, now)
    columns: dict[str, Any] = {
        "state": FAILED if failed else DONE,
        "last_seq": terminal.seq,
        "error": error,
        "owner_replica": None,
        "owner_incarnation": None,
        "lease_expires_at": None,
    }
    update_turn(tx, turn_id, now, **columns)
    stored = _stored(turn, attempt, events, now)
    # The row as that update left it, from the row locked above (no read after it,
    # decision 661): nothing else of this transaction changes it.
    ended = dataclasses.replace(turn, **columns, updated_at=now)
    return Closed(ended, (*stored, terminal))


def _stored(
    turn: TurnRecord, attempt: int, events: Sequence[NewEvent], now: float
) -> tuple[EventRecord, ...]:
    """The events `_append` stored of `events` after `turn` (as it was before it):
    exactly those past its last_seq (a gap raises, a resend of one stored is
    skipped)."""
    return tuple(
        EventRecord(turn.turn_id, seq, attempt, type_, data_json, now)
        for seq, type_, data_json in events
        if seq > turn.last_seq
    )


def resume_detached(tx: Tx, *, turn_id: str, resume_json: str, policy: Policy) -> TurnRecord:
    turn = lock_turn(tx, turn_id)
    if turn.state != PARKED:
        hint = " (it was already resumed)" if turn.state == RUNNING else ""
        raise WrongState(f"turn {turn_id!r} is {turn.state}, not PARKED{hint}")
    now = time.time()
    # No rewind: nothing was lost on a park. The turn waits, RUNNING without an
    # owner, until a replica claims it; the reaper hands it out again if none does.
    update_turn(
        tx,
        turn_id,
        now,
        state=RUNNING,
        resume_json=resume_json,
        interrupt_json=None,
        owner_replica=None,
        owner_incarnation=None,
        lease_expires_at=now + policy.claim_seconds,
    )
    return reload_turn(tx, turn_id)


def claim_turn(
    tx: Tx, *, turn_id: str, attempt: int, replica: str, incarnation: str, policy: Policy
) -> tuple[TurnRecord, str, bool]:
    """Make the replica the turn's owner: (the turn, the checkpoint it continues
    from or "", whether its thread has no root checkpoint: `claim_start`)."""
    turn = lock_turn(tx, turn_id)
    reoffered = turn.handed == REOFFERED
    fence(dataclasses.replace(turn, handed=0) if reoffered else turn, attempt)
    if turn.owned:
        _fence_owner(turn, replica, incarnation)  # re-claiming one's own turn is fine
    now = time.time()
    columns: dict[str, object] = {
        "owner_replica": replica,
        "owner_incarnation": incarnation,
        "lease_expires_at": now + policy.lease_seconds,
    }
    if turn.handed:
        columns["handed"] = 0
    if reoffered:
        # Offered again after a hand-off that carried its claim and was not taken:
        # a new attempt (uncharged, nothing ran), so that the execution a late copy
        # of that hand-off starts is fenced by its attempt (decision 590).
        columns["attempts"] = turn.attempts + 1
    update_turn(tx, turn_id, now, **columns)
    checkpoint_id, thread_empty = claim_start(tx.conn, turn_id, turn.thread_id)
    claimed = reload_turn(tx, turn_id)
    tx.remember_turn(claimed)  # its first append reads no row
    return claimed, checkpoint_id, thread_empty
