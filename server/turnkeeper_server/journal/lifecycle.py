"""The whole life of a turn beyond run, park and finish: cancel, the thread's queue,
double-texting on StartTurn, and the deadlines the reaper enforces.

    RUNNING | PARKED | QUEUED --cancel--> CANCELLED     (terminal turn.cancelled)
    PARKED --its thread's next LangGraph run--> DONE    (terminal turn.done, answered)
    a live turn ends (any way) --> the thread's oldest QUEUED turn becomes RUNNING
    RUNNING past run_deadline_at, PARKED past park_deadline_at --> FAILED + reason

StartTurn on a busy thread (reject | enqueue | interrupt | rollback) is `start`'s,
built on the cancel and the deadlines here.

Like `transitions`, every function runs in the writer thread inside one transaction
and either completes or raises a domain error leaving nothing behind. Outbox rows
are written in the same transaction. The SQL is plain: PostgreSQL accepts it too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from turnkeeper_server.errors import WrongState
from turnkeeper_server.journal import runs, transitions
from turnkeeper_server.records import (
    CANCELLED,
    DONE,
    FAILED,
    LIVE,
    LIVE_SQL,
    PARKED,
    QUEUED,
    RUNNING,
    TURN_COLUMNS,
    Policy,
    TurnRecord,
)
from turnkeeper_server.store.contract import Conn, Tx

# Turn.end_reason of the turns the service itself ended.
REASON_CANCELLED = "cancelled"
REASON_MAX_RUN_TIME = "max_run_time"
REASON_PARK_EXPIRED = "park_expired"
# A parked turn the thread's next LangGraph API run took over (close_parked).
REASON_ANSWERED = "answered"


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


def _end(
    tx: Tx, turn: TurnRecord, *, state: str, reason: str, error: str, last_seq: int, now: float
) -> None:
    tx.forget_turn(turn.turn_id)  # ended: the writer's record of it goes
    transitions.update_turn(
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
    turn = transitions.lock_turn(tx, turn_id)
    if turn.state not in (*LIVE, QUEUED):
        raise WrongState(
            f"turn {turn_id!r} is already over ({turn.state}): only a RUNNING, PARKED or "
            "QUEUED turn can be cancelled"
        )
    cancelled = cancel_live(tx, turn, rollback=rollback, detail=detail, policy=policy)
    promoted = promote_queued(tx, turn.thread_id, policy) if turn.state in LIVE else None
    return cancelled, Ended(promoted=promoted, stop_owner=cancelled.owner)


def cancel_live(
    tx: Tx, turn: TurnRecord, *, rollback: bool, detail: str, policy: Policy
) -> Cancelled:
    """Cancel `turn` (locked by the caller): its terminal turn.cancelled, CANCELLED,
    and with `rollback` the checkpoints it wrote removed. The thread's queue is the
    caller's to move on."""
    now = time.time()
    removed = remove_turn_checkpoints(tx, turn.turn_id) if rollback else 0
    data: dict[str, object] = {"reason": REASON_CANCELLED, "rollback": rollback}
    if detail:
        data["detail"] = detail
    last = transitions.append_terminal(tx, turn, turn.last_seq, "turn.cancelled", data, policy, now)
    _end(tx, turn, state=CANCELLED, reason=REASON_CANCELLED, error=detail, last_seq=last, now=now)
    return Cancelled(transitions.reload_turn(tx, turn.turn_id), _owner(turn), removed)


def close_parked(
    tx: Tx, thread_id: str, *, detail: str, policy: Policy
) -> tuple[TurnRecord, Ended] | None:
    """The thread's PARKED turn, if it has one, ends DONE (a terminal turn.done with
    reason `answered`): a LangGraph API run is starting on the thread, and it goes on
    from the thread's checkpoint (LangGraph's server: a run that stopped at an
    interrupt is over, and the next run answers it). Its checkpoints stay, they are
    what the next run starts from. A turn queued behind it is promoted, as after any
    end. None when the thread has no parked turn."""
    row = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE thread_id = ? AND state = '{PARKED}'"
        f"{tx.for_update}",
        (thread_id,),
    ).fetchone()
    if row is None:
        return None
    turn = TurnRecord(*row)
    now = time.time()
    data: dict[str, object] = {"reason": REASON_ANSWERED, "detail": detail}
    last = transitions.append_terminal(tx, turn, turn.last_seq, "turn.done", data, policy, now)
    _end(tx, turn, state=DONE, reason=REASON_ANSWERED, error="", last_seq=last, now=now)
    closed = transitions.reload_turn(tx, turn.turn_id)
    return closed, Ended(promoted=promote_queued(tx, thread_id, policy))


def hand_to_queued_run(
    tx: Tx, thread_id: str, *, policy: Policy
) -> tuple[TurnRecord, Ended] | None:
    """When the thread's turn is parked and the oldest turn queued behind it is a
    LangGraph API run, the parked turn ends answered and the queued run starts
    (LangGraph's server: a run stopped at an interrupt is over, the next one runs).
    A turn queued through another door waits for a resume or a cancel, as before."""
    head = queued_run(tx.conn, thread_id)
    if head is None:
        return None
    return close_parked(tx, thread_id, detail=f"answered by run {head}", policy=policy)


def queued_run(conn: Conn, thread_id: str) -> str | None:
    """The thread's oldest queued turn, when it is a LangGraph API run."""
    head = conn.execute(
        "SELECT turn_id FROM main.turns WHERE thread_id = ? AND state = 'QUEUED' "
        "ORDER BY created_at, turn_id LIMIT 1",
        (thread_id,),
    ).fetchone()
    return str(head[0]) if head is not None and runs.is_run(conn, head[0]) else None


# -- the thread's queue ---------------------------------------------------------------


def promote_queued(tx: Tx, thread_id: str, policy: Policy) -> TurnRecord | None:
    """The thread's live turn ended: its oldest QUEUED turn starts, RUNNING without
    an owner until a replica claims it (the reaper hands it out again if none does).
    Nothing happens while another turn of the thread is live."""
    # The oldest queued turn unless one is live, in one statement (decision 661): a
    # finish on a thread with no queue waits for one answer, not two.
    row = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE thread_id = ? AND state = 'QUEUED' "
        f"AND NOT EXISTS (SELECT 1 FROM main.turns WHERE thread_id = ? AND state IN {LIVE_SQL}) "
        f"ORDER BY created_at, turn_id LIMIT 1{tx.for_update}",
        (thread_id, thread_id),
    ).fetchone()
    if row is None:
        return None
    turn = TurnRecord(*row)
    now = time.time()
    transitions.update_turn(
        tx,
        turn.turn_id,
        now,
        state=RUNNING,
        lease_expires_at=now + policy.claim_seconds,
        run_deadline_at=deadline(now, turn.max_run_seconds),
    )
    return transitions.reload_turn(tx, turn.turn_id)


def after_end(tx: Tx, turn: TurnRecord, policy: Policy) -> Ended:
    """Call after any transition that may have ended `turn`: starts the queue."""
    if turn.state in LIVE:
        return Ended()
    return Ended(promoted=promote_queued(tx, turn.thread_id, policy))


def deadline(now: float, seconds: float) -> float | None:
    """When a deadline of `seconds` started `now` falls due; None for 0 (none)."""
    return now + seconds if seconds > 0 else None


# -- deadlines ------------------------------------------------------------------------


def on_parked(tx: Tx, turn: TurnRecord) -> TurnRecord:
    """A park stops the run clock and starts the park clock. A turn on probation
    (`containment`) that parks did not kill its executor: it is cleared."""
    now = time.time()
    transitions.update_turn(
        tx,
        turn.turn_id,
        now,
        suspect=0,
        run_deadline_at=None,
        park_deadline_at=deadline(now, turn.park_expiry_seconds),
    )
    return transitions.reload_turn(tx, turn.turn_id)


def on_resumed(tx: Tx, turn: TurnRecord) -> TurnRecord:
    """A resume starts a new run segment: the run clock starts again."""
    now = time.time()
    transitions.update_turn(
        tx,
        turn.turn_id,
        now,
        run_deadline_at=deadline(now, turn.max_run_seconds),
        park_deadline_at=None,
    )
    return transitions.reload_turn(tx, turn.turn_id)


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
        last = transitions.append_terminal(
            tx, turn, turn.last_seq, "turn.failed", {"error": error, "reason": reason}, policy, now
        )
        _end(tx, turn, state=FAILED, reason=reason, error=error, last_seq=last, now=now)
        ended = transitions.reload_turn(tx, turn.turn_id)
        out.append(
            (
                ended,
                Ended(promoted=promote_queued(tx, turn.thread_id, policy), stop_owner=_owner(turn)),
            )
        )
    return out
