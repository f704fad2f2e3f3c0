"""Poison containment: a turn that keeps killing its executor must not take the
healthy turns that shared the process down with it.

A crash is charged (counted against the re-drive cap) only to a turn that can be
blamed for it:

- the dead incarnation ran that turn alone (one orphan): it is blamed;
- it ran several, one of them on *probation* (below): the probation turn is blamed;
- it ran several and none on probation: nobody is blamed. Each is re-driven with
  its attempt spent but no charge, and becomes a *suspect*; a one-off crash (a
  deploy, a lost node) stops there and every turn resumes at once, in parallel.
- a suspect orphaned again in such a crash is *held*: re-driven, but handed to
  nobody. The agent's held turns then run one at a time, each on *probation*
  (alone among the suspects): a healthy one finishes and the next is released; the
  poison one crashes its executor alone, is blamed, runs again on probation, and
  ends FAILED after exactly `max_redrives` charged re-drives.

Lease expiry applies the same rule, per dead incarnation; an operator's Redrive is
always charged. The SQL is plain: PostgreSQL accepts it too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence

from turnkeeper_server.journal import redrive
from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.journal.transitions import (
    latest_boundary,
    reload_turn,
    update_turn,
)
from turnkeeper_server.records import HANDED, RUNNING, TURN_COLUMNS, Policy, TurnRecord
from turnkeeper_server.store.contract import Conn, Tx

NONE, SUSPECT, HELD, PROBATION = 0, 1, 2, 3


def blame(
    tx: Tx,
    orphans: Sequence[TurnRecord],
    owner: tuple[str, str] | None,
    policy: Policy,
    refused: Collection[str] = (),
) -> list[Redriven]:
    """Re-drive the RUNNING turns of one dead incarnation. Returns those to run
    now (owned by `owner`, or to hand out when None); held turns are not in it.
    Turns in `refused` (whose graph version `owner` may not run) go to nobody."""
    probation = [t for t in orphans if t.suspect == PROBATION]
    blamed = {t.turn_id for t in (orphans if len(orphans) == 1 else probation)}
    out: list[Redriven] = []
    for turn in orphans:
        owner_of = None if turn.turn_id in refused else owner
        if turn.turn_id in blamed:
            out.append(redrive.redrive_orphan(tx, turn, policy, owner_of, charge=True))
        elif turn.suspect == SUSPECT:
            redrive.redrive_orphan(tx, turn, policy, None, charge=False)
            # Handed to nobody: no lease, so the lease reaper passes it by.
            update_turn(tx, turn.turn_id, time.time(), suspect=HELD, lease_expires_at=None)
        else:
            r = redrive.redrive_orphan(tx, turn, policy, owner_of, charge=False)
            update_turn(tx, turn.turn_id, time.time(), suspect=SUSPECT)
            out.append(
                Redriven(
                    reload_turn(tx, turn.turn_id),
                    r.checkpoint_id,
                    r.rewind_seq,
                    r.failed_at_cap,
                    rewound=r.rewound,
                )
            )
    return out


def release_next(
    tx: Tx, agent: str, owner: tuple[str, str] | None, policy: Policy
) -> Redriven | None:
    """Put the agent's oldest held turn on probation, unless one already is. Two
    replicas doing this at once on PostgreSQL would each see none: the partial
    unique index `turns_one_probation` makes the later one fail and run again."""
    busy = tx.execute(
        "SELECT 1 FROM main.turns WHERE agent = ? AND suspect = 3 AND state = 'RUNNING' LIMIT 1",
        (agent,),
    ).fetchone()
    if busy is not None:
        return None
    row = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE agent = ? AND suspect = 2 "
        f"AND state = 'RUNNING' ORDER BY created_at, turn_id LIMIT 1{tx.for_update}",
        (agent,),
    ).fetchone()
    if row is None:
        return None
    turn = TurnRecord(*row)
    now = time.time()
    update_turn(
        tx,
        turn.turn_id,
        now,
        suspect=PROBATION,
        owner_replica=owner[0] if owner else None,
        owner_incarnation=owner[1] if owner else None,
        lease_expires_at=now + (policy.lease_seconds if owner else policy.claim_seconds),
    )
    checkpoint_id, _ = latest_boundary(tx.conn, turn.turn_id)
    return Redriven(reload_turn(tx, turn.turn_id), checkpoint_id, turn.last_seq, False)


def _partly_alive(
    tx: Tx,
    replica: str,
    incarnation: str,
    expired: Sequence[TurnRecord],
    now: float,
    policy: Policy,
) -> bool:
    """Whether to wait before blaming: other turns of the same incarnation still hold
    a lease. A dead process's leases all lapse within a heartbeat interval of each
    other, and blaming only the first to lapse would charge it alone for a crash it
    shared; after a whole lease of waiting the lapsed ones are taken as they are."""
    total = tx.execute(
        "SELECT count(*) FROM main.turns WHERE state = 'RUNNING' "
        "AND owner_replica = ? AND owner_incarnation = ?",
        (replica, incarnation),
    ).fetchone()[0]
    first = min(t.lease_expires_at or now for t in expired)
    return bool(total > len(expired) and first > now - policy.lease_seconds)


def redrive_replica(
    tx: Tx,
    *,
    agent: str,
    replica: str,
    incarnation: str,
    policy: Policy,
    may_take: Callable[[TurnRecord], bool] = lambda turn: True,
) -> tuple[list[Redriven], list[Redriven]]:
    """The startup Redrive, with blame: the replica's older incarnations' turns are
    orphans of one crash; unowned turns waiting for a claimer (not held ones) and
    the agent's next held turn go to the caller too. Returns (the caller's turns,
    the turns re-driven to nobody because the caller may not run them: `may_take`,
    the agent's version policy, said no), for the caller to hand out."""
    rows = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE state = 'RUNNING' AND agent = ? "
        "AND ((owner_replica = ? AND owner_incarnation != ?) OR "
        f"(owner_replica IS NULL AND suspect != 2)) ORDER BY created_at{tx.for_update}",
        (agent, replica, incarnation),
    ).fetchall()
    turns = [TurnRecord(*r) for r in rows]
    owner = (replica, incarnation)
    out: list[Redriven] = []
    dead: dict[str, list[TurnRecord]] = {}
    for turn in turns:
        # A turn handed to an older incarnation of this replica that never took it
        # is no orphan of its crash: nothing of it ran (decision 590).
        if turn.taken:
            dead.setdefault(turn.owner_incarnation or "", []).append(turn)
    refused = {t.turn_id for t in turns if not may_take(t)}
    for orphans in dead.values():
        out += blame(tx, orphans, owner, policy, refused)
    for turn in turns:
        if not turn.taken and turn.turn_id not in refused:
            out.append(redrive.hand_out(tx, turn, owner=owner, lease=policy.lease_seconds))
    released = release_next(tx, agent, owner, policy)
    if released is not None:
        if may_take(released.turn):
            out.append(released)
        else:
            update_turn(
                tx,
                released.turn.turn_id,
                time.time(),
                owner_replica=None,
                owner_incarnation=None,
                lease_expires_at=time.time() + policy.claim_seconds,
            )
            refused.add(released.turn.turn_id)
            out.append(
                Redriven(
                    reload_turn(tx, released.turn.turn_id),
                    released.checkpoint_id,
                    released.rewind_seq,
                    False,
                )
            )
    return (
        [r for r in out if r.turn.turn_id not in refused],
        [r for r in out if r.turn.turn_id in refused],
    )


def reoffer(tx: Tx, handed: TurnRecord, policy: Policy) -> Redriven | None:
    """A turn whose claim rode a hand-off its owner did not acknowledge, offered
    again to nobody, as the reaper would at the end of its claim window (decision
    590); None when it is no longer that untaken hand-off (taken, ended, re-driven)."""
    row = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE turn_id = ?{tx.for_update}",
        (handed.turn_id,),
    ).fetchone()
    if row is None:
        return None
    turn = TurnRecord(*row)
    if (
        turn.state != RUNNING
        or turn.handed != HANDED
        or turn.attempts != handed.attempts
        or turn.owner_incarnation != handed.owner_incarnation
    ):
        return None
    return redrive.hand_out(tx, turn, owner=None, lease=policy.claim_seconds)


def lapsed_owners(
    conn: Conn, *, expired_before: float | None = None, limit: int = 500
) -> dict[tuple[str, str, str], dict[str, int]]:
    """The owned RUNNING turns whose lease lapsed, by (agent, replica, incarnation):
    {turn_id: attempt}, for the service to ask their agents before it re-drives."""
    now = time.time()
    bound = now if expired_before is None else min(now, expired_before)
    rows = conn.execute(
        "SELECT agent, owner_replica, owner_incarnation, turn_id, attempts FROM main.turns "
        "WHERE state = 'RUNNING' AND lease_expires_at < ? AND owner_replica IS NOT NULL "
        "ORDER BY lease_expires_at LIMIT ?",
        (bound, limit),
    ).fetchall()
    out: dict[tuple[str, str, str], dict[str, int]] = {}
    for agent, replica, incarnation, turn_id, attempts in rows:
        out.setdefault((agent, replica, incarnation or ""), {})[turn_id] = attempts
    return out


def renew_alive(tx: Tx, alive: dict[tuple[str, str], int], policy: Policy) -> list[TurnRecord]:
    """A fresh lease for each turn its agent said it still runs ({(turn_id,
    incarnation): attempt}), if it is still that attempt of that owner's and its lease
    still lapsed: a slow heartbeat is no death (issue 51)."""
    now = time.time()
    renewed = []
    for (turn_id, incarnation), attempt in alive.items():
        row = tx.execute(
            f"SELECT {TURN_COLUMNS} FROM main.turns WHERE turn_id = ?{tx.for_update}",
            (turn_id,),
        ).fetchone()
        if row is None:
            continue
        turn = TurnRecord(*row)
        if (
            turn.state != RUNNING
            or turn.attempts != attempt
            or turn.owner_incarnation != incarnation
            or (turn.lease_expires_at or 0) >= now
        ):
            continue
        update_turn(tx, turn_id, now, lease_expires_at=now + policy.lease_seconds)
        renewed.append(turn)
    return renewed


def reap_expired(
    tx: Tx, *, policy: Policy, limit: int = 500, expired_before: float | None = None
) -> list[Redriven]:
    """Lease expiry with blame, per dead incarnation; then each agent whose held
    turns wait and who has none on probation gets its next one released.
    `expired_before`: only leases that lapsed before it (the reaper's, after the
    service's own loop was held: decision 320)."""
    now = time.time()
    bound = now if expired_before is None else min(now, expired_before)
    rows = tx.execute(
        f"SELECT {TURN_COLUMNS} FROM main.turns WHERE state = 'RUNNING' AND lease_expires_at < ? "
        f"ORDER BY lease_expires_at LIMIT ?{tx.skip_locked}",
        (bound, limit),
    ).fetchall()
    out: list[Redriven] = []
    dead: dict[tuple[str, str], list[TurnRecord]] = {}
    for row in rows:
        turn = TurnRecord(*row)
        # An owner that never took its hand-off (decision 590) did not crash: the
        # turn is offered again with nothing spent or charged.
        if turn.taken:
            key = (turn.owner_replica or "", turn.owner_incarnation or "")
            dead.setdefault(key, []).append(turn)
        else:
            out.append(redrive.hand_out(tx, turn, owner=None, lease=policy.claim_seconds))
    for (replica, incarnation), orphans in dead.items():
        if _partly_alive(tx, replica, incarnation, orphans, now, policy):
            continue
        out += blame(tx, orphans, None, policy)
    agents = tx.execute(
        "SELECT DISTINCT agent FROM main.turns WHERE suspect = 2 AND state = 'RUNNING'"
    ).fetchall()
    for (agent,) in agents:
        released = release_next(tx, agent, None, policy)
        if released is not None:
            out.append(released)
    return out
