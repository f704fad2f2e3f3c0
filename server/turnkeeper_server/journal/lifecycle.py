"""The whole life of a turn beyond run, park and finish: cancel, the thread's queue,
double-texting on StartTurn, and the deadlines the reaper enforces.

    RUNNING | PARKED | QUEUED --cancel--> CANCELLED     (terminal turn.cancelled)
    StartTurn on a busy thread: reject | enqueue (QUEUED) | interrupt | rollback
    a live turn ends (any way) --> the thread's oldest QUEUED turn becomes RUNNING
    RUNNING past run_deadline_at, PARKED past park_deadline_at --> FAILED + reason

Like `transitions`, every function runs in the writer thread inside one transaction
and either completes or raises a domain error leaving nothing behind. Outbox rows
are written in the same transaction. The SQL is plain: PostgreSQL accepts it too.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from turnkeeper_server.errors import InvalidArgument, WrongState
from turnkeeper_server.journal import transitions as journal
from turnkeeper_server.journal.records import TURN_COLUMNS, Policy, TurnRecord
from turnkeeper_server.journal.transitions import (
    CANCELLED,
    FAILED,
    LIVE,
    QUEUED,
    RUNNING,
)
from turnkeeper_server.store.contract import Tx

# StartTurn's multitask strategies (LangGraph Platform's names).
REJECT, ENQUEUE, INTERRUPT, ROLLBACK = "reject", "enqueue", "interrupt", "rollback"
STRATEGIES = (REJECT, ENQUEUE, INTERRUPT, ROLLBACK)

# Turn.end_reason of the turns the service itself ended.
REASON_CANCELLED = "cancelled"
REASON_MAX_RUN_TIME = "max_run_time"
REASON_PARK_EXPIRED = "park_expired"


@dataclass(frozen=True)
class Cancelled:
    """A turn this transaction cancelled, and what the engine does after commit."""

    turn: TurnRecord
    # (replica, incarnation) that was executing it: told over NATS to stop.
    owner: tuple[str, str] | None
    checkpoints_removed: int


@dataclass(frozen=True)
class Ended:
    """What a transition that ended a live turn left for the engine to do."""

    # The thread's next turn, now RUNNING without an owner: to hand to a replica.
    promoted: TurnRecord | None = None
    # The executor to tell to stop (a cancel or a deadline of a RUNNING turn).
    stop_owner: tuple[str, str] | None = None


def _terminal(
    tx: Tx, turn: TurnRecord, type_: str, data: dict[str, object], policy: Policy, now: float
) -> int:
    seq = turn.last_seq + 1
    data_json = json.dumps(data)
    tx.execute(
        "INSERT INTO main.events (turn_id, seq, attempt, type, data_json, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (turn.turn_id, seq, turn.attempts, type_, data_json, now),
    )
    journal.write_outbox(
        tx,
        policy.events_subject(turn.turn_id),
        journal._event_payload(turn, seq, turn.attempts, type_, data_json),
        now,
    )
    return seq


def _end(
    tx: Tx, turn: TurnRecord, *, state: str, reason: str, error: str, last_seq: int, now: float
) -> None:
    journal.update_turn(
        tx,
        turn.turn_id,
        now,
        state=state,
        last_seq=last_seq,
        error=error,
        end_reason=reason,
        owner_replica=None,
        owner_incarnation=None,
        lease_expires_at=None,
        run_deadline_at=None,
        park_deadline_at=None,
    )


def _owner(turn: TurnRecord) -> tuple[str, str] | None:
    if turn.state == RUNNING and turn.owner_replica is not None:
        return (turn.owner_replica, turn.owner_incarnation or "")
    return None


# -- rollback ---------------------------------------------------------------------------


def remove_turn_checkpoints(tx: Tx, turn_id: str) -> int:
    """Delete the checkpoints (and their writes) the turn wrote: the ones its
    boundaries record. Returns how many checkpoints went."""
    rows = tx.execute(
        "SELECT thread_id, checkpoint_ns, checkpoint_id FROM sessions.turnkeeper_boundaries "
        "WHERE turn_id = ?",
        (turn_id,),
    ).fetchall()
    removed = 0
    for thread_id, ns, checkpoint_id in rows:
        removed += tx.checkpoints.delete_checkpoint(tx, thread_id, ns, checkpoint_id)
    tx.execute("DELETE FROM sessions.turnkeeper_boundaries WHERE turn_id = ?", (turn_id,))
    return removed


# -- cancel ---------------------------------------------------------------------------


def cancel_turn(
    tx: Tx, *, turn_id: str, rollback: bool, detail: str, policy: Policy
) -> tuple[Cancelled, Ended]:
    turn = journal.lock_turn(tx, turn_id)
    if turn.state not in (*LIVE, QUEUED):
        raise WrongState(
            f"turn {turn_id!r} is already over ({turn.state}): only a RUNNING, PARKED or "
            "QUEUED turn can be cancelled"
        )
    cancelled = _cancel(tx, turn, rollback=rollback, detail=detail, policy=policy)
    promoted = promote_queued(tx, turn.thread_id, policy) if turn.state in LIVE else None
    return cancelled, Ended(promoted=promoted, stop_owner=cancelled.owner)


def _cancel(tx: Tx, turn: TurnRecord, *, rollback: bool, detail: str, policy: Policy) -> Cancelled:
    now = time.time()
    removed = remove_turn_checkpoints(tx, turn.turn_id) if rollback else 0
    data: dict[str, object] = {"reason": REASON_CANCELLED, "rollback": rollback}
    if detail:
        data["detail"] = detail
    last = _terminal(tx, turn, "turn.cancelled", data, policy, now)
    _end(tx, turn, state=CANCELLED, reason=REASON_CANCELLED, error=detail, last_seq=last, now=now)
    return Cancelled(journal.reload_turn(tx, turn.turn_id), _owner(turn), removed)


# -- the thread's queue ---------------------------------------------------------------


def promote_queued(tx: Tx, thread_id: str, policy: Policy) -> TurnRecord | None:
    """The thread's live turn ended: its oldest QUEUED turn starts, RUNNING without
    an owner until a replica claims it (the reaper hands it out again if none does).
    Nothing happens while another turn of the thread is live."""
    live = tx.execute(
        "SELECT turn_id FROM main.turns WHERE thread_id = ? AND state IN ('RUNNING','PARKED')",
        (thread_id,),
    ).fetchone()
    if live is not None:
        return None
    row = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE thread_id = ? AND state = 'QUEUED' "
        f"ORDER BY created_at, turn_id LIMIT 1{tx.for_update}",
        (thread_id,),
    ).fetchone()
    if row is None:
        return None
    turn = TurnRecord(*row)
    now = time.time()
    journal.update_turn(
        tx,
        turn.turn_id,
        now,
        state=RUNNING,
        lease_expires_at=now + policy.claim_seconds,
        run_deadline_at=_deadline(now, turn.max_run_seconds),
    )
    return journal.reload_turn(tx, turn.turn_id)


def after_end(tx: Tx, turn: TurnRecord, policy: Policy) -> Ended:
    """Call after any transition that may have ended `turn`: starts the queue."""
    if turn.state in LIVE:
        return Ended()
    return Ended(promoted=promote_queued(tx, turn.thread_id, policy))


# -- StartTurn with a strategy ----------------------------------------------------------


def _deadline(now: float, seconds: float) -> float | None:
    return now + seconds if seconds > 0 else None


def start_turn(
    tx: Tx,
    *,
    turn_id: str,
    thread_id: str,
    agent: str,
    input_json: str,
    replica: str,
    incarnation: str,
    strategy: str,
    max_run_seconds: float,
    park_expiry_seconds: float,
    policy: Policy,
) -> tuple[TurnRecord, bool, Cancelled | None]:
    """StartTurn, with what to do when the thread has a live turn."""
    if strategy not in STRATEGIES:
        raise InvalidArgument(f"multitask strategy must be one of {', '.join(STRATEGIES)}")
    max_run = max_run_seconds or policy.max_run_seconds
    park_expiry = park_expiry_seconds or policy.park_expiry_seconds
    if journal.load_turn(tx.conn, turn_id) is not None:
        # Idempotent by turn_id (or ALREADY_EXISTS): the journal's own rule.
        turn, created = journal.start_turn(
            tx,
            turn_id=turn_id,
            thread_id=thread_id,
            agent=agent,
            input_json=input_json,
            replica=replica,
            incarnation=incarnation,
            policy=policy,
        )
        return turn, created, None
    live_sql = (
        f"SELECT {TURN_COLUMNS} FROM main.turns "
        "WHERE thread_id = ? AND state IN ('RUNNING','PARKED')"
    )
    # Locked (PostgreSQL): the live turn cannot end, and promote the queue, between
    # this read and the insert below, so a QUEUED turn is never left behind nobody.
    live_row = tx.execute(live_sql + tx.for_update, (thread_id,)).fetchone()
    if live_row is None and tx.for_update:
        # Waiting on that lock may have ended in a commit that promoted a QUEUED
        # turn; only a new statement sees it.
        live_row = tx.execute(live_sql, (thread_id,)).fetchone()
    live = TurnRecord(*live_row) if live_row else None
    waiting = tx.execute(
        "SELECT count(*) FROM main.turns WHERE thread_id = ? AND state = 'QUEUED'", (thread_id,)
    ).fetchone()[0]
    cancelled: Cancelled | None = None
    now = time.time()
    if strategy == ENQUEUE and (live is not None or waiting):
        tx.execute(
            "INSERT INTO main.turns (turn_id, thread_id, agent, state, input_json, "
            "request_hash, created_at, updated_at, max_run_seconds, park_expiry_seconds) "
            "VALUES (?, ?, ?, 'QUEUED', ?, ?, ?, ?, ?, ?)",
            (
                turn_id,
                thread_id,
                agent,
                input_json,
                journal.request_hash(thread_id, agent, input_json),
                now,
                now,
                max_run,
                park_expiry,
            ),
        )
        return journal.reload_turn(tx, turn_id), True, None
    if live is not None and strategy in (INTERRUPT, ROLLBACK):
        cancelled = _cancel(
            tx,
            live,
            rollback=strategy == ROLLBACK,
            detail=f"{strategy}: turn {turn_id!r} was started on the thread",
            policy=policy,
        )
    turn, created = journal.start_turn(
        tx,
        turn_id=turn_id,
        thread_id=thread_id,
        agent=agent,
        input_json=input_json,
        replica=replica,
        incarnation=incarnation,
        policy=policy,
    )
    journal.update_turn(
        tx,
        turn_id,
        now,
        max_run_seconds=max_run,
        park_expiry_seconds=park_expiry,
        run_deadline_at=_deadline(now, max_run),
    )
    return journal.reload_turn(tx, turn_id), created, cancelled


# -- deadlines ------------------------------------------------------------------------


def on_parked(tx: Tx, turn: TurnRecord) -> TurnRecord:
    """A park stops the run clock and starts the park clock. A turn on probation
    (`containment`) that parks did not kill its executor: it is cleared."""
    now = time.time()
    journal.update_turn(
        tx,
        turn.turn_id,
        now,
        suspect=0,
        run_deadline_at=None,
        park_deadline_at=_deadline(now, turn.park_expiry_seconds),
    )
    return journal.reload_turn(tx, turn.turn_id)


def on_resumed(tx: Tx, turn: TurnRecord) -> TurnRecord:
    """A resume starts a new run segment: the run clock starts again."""
    now = time.time()
    journal.update_turn(
        tx,
        turn.turn_id,
        now,
        run_deadline_at=_deadline(now, turn.max_run_seconds),
        park_deadline_at=None,
    )
    return journal.reload_turn(tx, turn.turn_id)


def expire_deadlines(tx: Tx, *, policy: Policy, limit: int = 500) -> list[tuple[TurnRecord, Ended]]:
    """Fail the RUNNING turns past their run deadline and the PARKED turns past their
    park deadline, each with a terminal turn.failed event that says why. Never
    before the deadline: the comparison is with the time of this pass."""
    now = time.time()
    rows = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE "
        "(state = 'RUNNING' AND run_deadline_at < ?) OR "
        f"(state = 'PARKED' AND park_deadline_at < ?) LIMIT ?{tx.skip_locked}",
        (now, now, limit),
    ).fetchall()
    out: list[tuple[TurnRecord, Ended]] = []
    for row in rows:
        turn = TurnRecord(*row)
        if turn.state == RUNNING:
            reason = REASON_MAX_RUN_TIME
            error = f"the turn ran longer than its max run time of {turn.max_run_seconds:g}s"
        else:
            reason = REASON_PARK_EXPIRED
            error = (
                f"the turn stayed parked longer than its expiry of {turn.park_expiry_seconds:g}s"
            )
        last = _terminal(tx, turn, "turn.failed", {"error": error, "reason": reason}, policy, now)
        _end(tx, turn, state=FAILED, reason=reason, error=error, last_seq=last, now=now)
        ended = journal.reload_turn(tx, turn.turn_id)
        out.append(
            (
                ended,
                Ended(promoted=promote_queued(tx, turn.thread_id, policy), stop_owner=_owner(turn)),
            )
        )
    return out
