"""Re-drive: turns whose execution died are run again from their last checkpoint.

Three triggers, one mechanism (`redrive_orphan`): a replica's startup Redrive (its
older incarnation's turns are orphaned by definition) and the lease reaper (an owner
stopped heartbeating), both chosen by poison containment (containment.py), and an
operator's Redrive of one turn (`redrive_operator`). Each spends an
attempt and rewinds the turn's events to the boundary of its newest checkpoint,
publishing the rewind through the outbox; at the cap the turn is FAILED instead.
A turn that was handed out but never claimed spends nothing: nothing ran.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from turnkeeper_server.errors import WrongState
from turnkeeper_server.journal.transitions import (
    append_terminal,
    latest_boundary,
    lock_turn,
    reload_turn,
    update_turn,
    write_outbox,
)
from turnkeeper_server.records import (
    FAILED,
    HANDED,
    PARKED,
    REOFFERED,
    RUNNING,
    Policy,
    TurnRecord,
)
from turnkeeper_server.store.contract import Tx


@dataclass(frozen=True)
class Redriven:
    turn: TurnRecord
    checkpoint_id: str
    rewind_seq: int
    failed_at_cap: bool
    # True when this re-drive spent an attempt and published a rewind; False for
    # a turn that was only handed out again (nothing had run) or failed at the cap.
    rewound: bool = False


def redrive_orphan(
    tx: Tx,
    turn: TurnRecord,
    policy: Policy,
    owner: tuple[str, str] | None,
    *,
    charge: bool = True,
) -> Redriven:
    """Re-drive a RUNNING turn whose execution died: attempts+1 and a rewind to
    the boundary of its newest checkpoint, or FAILED with a synthetic terminal
    event when it was already charged `max_redrives` crashes. `charge=False`: the
    crash is not counted against the cap (`containment` decides)."""
    tx.forget_turn(turn.turn_id)  # re-driven: the writer's record of it is stale
    now = time.time()
    if charge and turn.charged >= policy.max_redrives:
        # Counted in the contract's terms: the re-drives charged to the turn, which
        # the cap limits (decision 196). Re-drives after a crash it shared with other
        # turns are in its attempts, not here: they were charged to nobody.
        error = (
            f"turn re-driven {turn.charged} times and orphaned again: the re-drive cap "
            f"is {policy.max_redrives} re-drives"
        )
        data = {"error": error, "redrives": turn.charged, "max_redrives": policy.max_redrives}
        last = append_terminal(tx, turn, turn.last_seq, "turn.failed", data, policy, now)
        update_turn(
            tx,
            turn.turn_id,
            now,
            state=FAILED,
            last_seq=last,
            error=error,
            owner_replica=None,
            owner_incarnation=None,
            lease_expires_at=None,
        )
        return Redriven(reload_turn(tx, turn.turn_id), "", turn.last_seq, True)
    checkpoint_id, boundary = latest_boundary(tx.conn, turn.turn_id)
    attempt = turn.attempts + 1
    tx.execute("DELETE FROM main.events WHERE turn_id = ? AND seq > ?", (turn.turn_id, boundary))
    update_turn(
        tx,
        turn.turn_id,
        now,
        attempts=attempt,
        charged=turn.charged + 1 if charge else turn.charged,
        last_seq=boundary,
        rewinds=turn.rewinds + 1,
        owner_replica=owner[0] if owner else None,
        owner_incarnation=owner[1] if owner else None,
        lease_expires_at=now + (policy.lease_seconds if owner else policy.claim_seconds),
    )
    rewind = {
        "turn_id": turn.turn_id,
        "thread_id": turn.thread_id,
        "checkpoint_id": checkpoint_id,
        "seq": boundary,
        "attempt": attempt,
    }
    write_outbox(tx, policy.rewind_subject, json.dumps(rewind), now)
    return Redriven(reload_turn(tx, turn.turn_id), checkpoint_id, boundary, False, rewound=True)


def redrive_operator(tx: Tx, *, turn_id: str, force: bool, policy: Policy) -> Redriven:
    turn = lock_turn(tx, turn_id)
    if turn.state != RUNNING:
        hint = "; use ResumeDetached for a parked turn" if turn.state == PARKED else ""
        raise WrongState(
            f"turn {turn_id!r} is {turn.state}: only a RUNNING turn is re-driven{hint}"
        )
    now = time.time()
    live = turn.owned and (turn.lease_expires_at or 0) > now
    if live and not force:
        raise WrongState(
            f"turn {turn_id!r} is owned by {turn.owner_replica}/{turn.owner_incarnation} "
            f"whose lease runs for {(turn.lease_expires_at or now) - now:.1f}s more; "
            "pass force to re-drive it anyway"
        )
    return redrive_orphan(tx, turn, policy, None)


def hand_out(tx: Tx, turn: TurnRecord, *, owner: tuple[str, str] | None, lease: float) -> Redriven:
    """An unowned RUNNING turn (resumed, or re-driven but never claimed) goes to
    `owner`, or waits another claim window; no attempt is spent and no rewind.

    So does one whose claim rode its hand-off and was not taken (decision 590):
    offered again to nobody it is REOFFERED, owner cleared, and no write of the
    attempt it was handed with is taken (`transitions.fence`); the owner it goes to
    next takes it as a new attempt, charged to nobody, which fences a late copy of
    that hand-off. A startup Redrive of the replica it was handed to (a new
    incarnation) takes it as it is: the incarnation it was handed to is gone."""
    now = time.time()
    columns: dict[str, object] = {"lease_expires_at": now + lease}
    if owner is not None:
        columns.update(owner_replica=owner[0], owner_incarnation=owner[1])
        if turn.handed:
            columns["handed"] = 0
        if turn.handed == REOFFERED:
            columns["attempts"] = turn.attempts + 1
    elif turn.handed == HANDED:
        columns.update(owner_replica=None, owner_incarnation=None, handed=REOFFERED)
    tx.forget_turn(turn.turn_id)
    update_turn(tx, turn.turn_id, now, **columns)
    checkpoint_id, _ = latest_boundary(tx.conn, turn.turn_id)
    return Redriven(reload_turn(tx, turn.turn_id), checkpoint_id, turn.last_seq, False)
