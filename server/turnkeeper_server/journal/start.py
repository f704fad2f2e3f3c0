"""StartTurn: one transition that journals a turn before its graph's first step,
with what to do when the thread is busy (the multitask strategy) and its deadlines.

    new turn_id, thread free           --> RUNNING (owned by the caller, or waiting
                                            for a claim when no replica is named)
    same turn_id, same request         --> the stored turn (idempotent)
    same turn_id, another request      --> ALREADY_EXISTS
    thread busy (a RUNNING or PARKED turn):
        reject    --> FAILED_PRECONDITION
        enqueue   --> QUEUED behind it (also behind turns already queued)
        interrupt --> it is cancelled, this one runs
        rollback  --> it is cancelled and its checkpoints removed, this one runs

The strategies are LangGraph Platform's names, from the client core's one table of
them (turnkeeper._multitask). One transaction: one read of the turns table (the
id and the thread's live turn, decision 582), on PostgreSQL a second after its lock
(the live turn or a queued one), and the insert that returns the row written; on
SQLite a look for a queued turn for `enqueue` alone.

A LangGraph API run whose thread does not exist yet makes it in the same
transaction (`StartRequest.new_thread`, decision 580): the thread's row and the turn,
one commit, and no read of a thread that this very statement found without a row or
a turn: a refused start leaves no thread.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from typing import Any

from turnkeeper._multitask import ENQUEUE, INTERRUPT, REJECT, ROLLBACK, STRATEGIES

from turnkeeper_server.errors import AlreadyExists, InvalidArgument, WrongState
from turnkeeper_server.journal import agents, lifecycle, runs, threads, transitions
from turnkeeper_server.journal.lifecycle import Cancelled
from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.records import (
    HANDED,
    LIVE_SQL,
    QUEUED,
    RUNNING,
    TURN_COLUMNS,
    Policy,
    TurnRecord,
)
from turnkeeper_server.store.contract import Tx

# The turn of the id asked for, and the thread's live turn (at most one of each).
_ID_OR_LIVE_ON_THREAD = (
    f"SELECT {TURN_COLUMNS} FROM main.turns "
    f"WHERE turn_id = ? OR (thread_id = ? AND state IN {LIVE_SQL})"
)
# The thread's live turn, else a turn queued on it, else nothing.
_LIVE_OR_QUEUED_ON_THREAD = (
    f"SELECT {TURN_COLUMNS} FROM main.turns WHERE thread_id = ? "
    f"AND (state IN {LIVE_SQL} OR state = '{QUEUED}') ORDER BY state = '{QUEUED}' LIMIT 1"
)


class ThreadMadeMeanwhile(AlreadyExists):
    """A start that was to make its thread found it made (by a request racing it):
    nothing was written; the caller starts again on the thread as it is."""


@dataclass(frozen=True, slots=True)
class NewThread:
    """The thread a run makes as it starts (a LangGraph API run without a thread, or
    with if_not_exists=create on an id no thread has): its row's metadata; its owner
    is the request's `thread_owner`."""

    metadata: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StartRequest:
    """What StartTurn asks for. `replica`/`incarnation` empty: no executor yet (the
    turn waits for a claim). Deadlines of 0 take the policy's defaults."""

    turn_id: str
    thread_id: str
    agent: str
    input_json: str
    replica: str = ""
    incarnation: str = ""
    # The executor's graph version (journal/versions.py), recorded when it owns the turn.
    graph_fingerprint: str = ""
    graph_label: str = ""
    strategy: str = REJECT
    max_run_seconds: float = 0.0
    park_expiry_seconds: float = 0.0
    # Refuse an agent no replica ever announced (journal/agents.py).
    require_announced: bool = False
    # Who a thread this turn opens belongs to (auth.identity of the caller, or of
    # whom a bridge acts for); "" without tokens: the threads row is left alone.
    thread_owner: str = ""
    # Make the thread in this transaction (it had neither a row nor a turn when the
    # caller looked); ThreadMadeMeanwhile when it has one now.
    new_thread: NewThread | None = None
    # The service names `replica`/`incarnation` itself and hands the turn to it with
    # its claim (decision 590): owned for a claim window until that replica takes it.
    handed: bool = False
    # A LangGraph API run's record (its metadata, kwargs, webhook), written with the
    # turn it describes (decision 700): never a turn without it, whatever dies when.
    run: RunRecord | None = None


@dataclass(frozen=True, slots=True)
class Started:
    turn: TurnRecord
    # False when the turn_id was already journaled with the same request.
    created: bool
    # The thread's live turn this one cancelled (interrupt, rollback).
    cancelled: Cancelled | None = None
    # A handed turn's claim (StartRequest.handed), as ClaimTurn answers it: the
    # checkpoint it continues from and whether its thread has no root checkpoint.
    checkpoint_id: str = ""
    thread_empty: bool = False


def request_hash(thread_id: str, agent: str, input_json: str) -> str:
    return hashlib.sha256(json.dumps([thread_id, agent, input_json]).encode()).hexdigest()


def start_turn(tx: Tx, request: StartRequest, policy: Policy) -> Started:
    if request.strategy not in STRATEGIES:
        raise InvalidArgument(f"multitask strategy must be one of {', '.join(STRATEGIES)}")
    started = _start(tx, request, policy)
    if started.created and request.run is not None:
        runs.put(tx, request.run)
    return started


def _start(tx: Tx, request: StartRequest, policy: Policy) -> Started:
    digest = request_hash(request.thread_id, request.agent, request.input_json)
    if request.new_thread is not None:
        return _start_on_new_thread(tx, request, request.new_thread, digest, policy)
    # The turn of this id and the thread's live turn, in one statement (decision
    # 582). Locked (PostgreSQL): the live turn cannot end, and promote the queue,
    # between this read and the insert below, so a QUEUED turn is never left behind
    # nobody.
    found = [
        TurnRecord(*row)
        for row in tx.execute(
            _ID_OR_LIVE_ON_THREAD + tx.for_update, (request.turn_id, request.thread_id)
        ).fetchall()
    ]
    existing = next((t for t in found if t.turn_id == request.turn_id), None)
    if existing is not None:
        return _same_request(existing, digest)
    if request.require_announced and not agents.announced(tx.conn, request.agent):
        raise WrongState(agents.unannounced(request.agent))
    live = found[0] if found else None
    # Whether a turn waits QUEUED on the thread: read when `enqueue` needs it.
    queued: bool | None = None
    if live is None and tx.for_update:
        # Waiting on that lock may have ended in a commit that promoted a QUEUED
        # turn; only a new statement sees it. It says whether one is queued too.
        row = tx.execute(_LIVE_OR_QUEUED_ON_THREAD, (request.thread_id,)).fetchone()
        seen = TurnRecord(*row) if row else None
        queued = seen is not None and seen.state == QUEUED
        live = None if seen is None or queued else seen
    if live is not None and live.turn_id == request.turn_id:
        # The same StartTurn through another replica committed between the two
        # reads (PostgreSQL reads each statement afresh): it is that turn.
        return _same_request(live, digest)
    max_run = request.max_run_seconds or policy.max_run_seconds
    park_expiry = request.park_expiry_seconds or policy.park_expiry_seconds
    if request.strategy == ENQUEUE and (
        live is not None or (_queued(tx, request.thread_id) if queued is None else queued)
    ):
        behind = _insert(tx, request, digest, QUEUED, None, None, max_run, park_expiry)
        return Started(_inserted(behind), True)
    cancelled: Cancelled | None = None
    if live is not None:
        if request.strategy not in (INTERRUPT, ROLLBACK):
            raise WrongState(
                f"thread {request.thread_id!r} already has a live turn {live.turn_id!r} "
                f"({live.state}); wait for it to end or resume it"
            )
        cancelled = lifecycle.cancel_live(
            tx,
            live,
            rollback=request.strategy == ROLLBACK,
            detail=f"{request.strategy}: turn {request.turn_id!r} was started on the thread",
            policy=policy,
        )
    turn = _inserted(_insert_running(tx, request, digest, policy))
    if not turn.handed:
        return Started(turn, True, cancelled)
    # What ClaimTurn would answer, read in this commit (decision 590).
    checkpoint_id, thread_empty = transitions.claim_start(tx.conn, turn.turn_id, turn.thread_id)
    return Started(turn, True, cancelled, checkpoint_id, thread_empty)


def _start_on_new_thread(
    tx: Tx, request: StartRequest, thread: NewThread, digest: str, policy: Policy
) -> Started:
    """The thread made and its turn started, RUNNING: two statements, each its own
    answer (on PostgreSQL two waits mid-group where the thread's ensure and the
    turn's start were seven in two commits). A thread this transaction's insert made
    had no turn: none is live or queued on it, whatever the strategy, and a
    concurrent start on it meets the one-live-turn index. A turn_id taken (on
    another thread: this one had no turn) is refused as a start of another request;
    the thread's row goes with the refusal."""
    if request.require_announced and not agents.announced(tx.conn, request.agent):
        raise WrongState(agents.unannounced(request.agent))
    made = threads.make(tx, request.thread_id, thread.metadata, time.time(), request.thread_owner)
    if made is None:
        raise ThreadMadeMeanwhile(
            f"thread {request.thread_id!r} was made by another request meanwhile"
        )
    turn = _insert_running(tx, request, digest, policy, on_conflict=True, ensure_thread=False)
    if turn is None:
        return _same_request(transitions.require_turn(tx.conn, request.turn_id), digest)
    # Handed with its claim (decision 590): a thread this commit made has no
    # checkpoint, which ClaimTurn would have read.
    return Started(turn, True, thread_empty=bool(turn.handed))


def _insert_running(
    tx: Tx,
    request: StartRequest,
    digest: str,
    policy: Policy,
    *,
    on_conflict: bool = False,
    ensure_thread: bool = True,
) -> TurnRecord | None:
    """The turn inserted RUNNING: owned by the request's replica with a lease, or by
    nobody with a claim window's. A handed turn's lease is a claim window's too: a
    hand-off that never arrives is offered again as soon as an unclaimed one is
    (containment.reap_expired, decision 591)."""
    now = time.time()
    owner = (request.replica, request.incarnation) if request.replica else None
    # Taken (TurnRecord.taken) as it is inserted: its owner runs it from its start.
    taken = owner is not None and not request.handed
    lease = now + (policy.lease_seconds if taken else policy.claim_seconds)
    return _insert(
        tx,
        request,
        digest,
        RUNNING,
        owner,
        lease,
        request.max_run_seconds or policy.max_run_seconds,
        request.park_expiry_seconds or policy.park_expiry_seconds,
        now=now,
        on_conflict=on_conflict,
        ensure_thread=ensure_thread,
    )


def _inserted(turn: TurnRecord | None) -> TurnRecord:
    # Without ON CONFLICT an insert returns its row or fails.
    assert turn is not None
    return turn


def _same_request(turn: TurnRecord, digest: str) -> Started:
    """Idempotent by turn_id, or ALREADY_EXISTS."""
    if turn.request_hash != digest:
        raise AlreadyExists(
            f"turn {turn.turn_id!r} already exists with a different thread, agent or input; "
            "use a new turn_id for a new request"
        )
    return Started(turn, False)


def _queued(tx: Tx, thread_id: str) -> bool:
    return (
        tx.execute(
            f"SELECT 1 FROM main.turns WHERE thread_id = ? AND state = '{QUEUED}' LIMIT 1",
            (thread_id,),
        ).fetchone()
        is not None
    )


def _insert(
    tx: Tx,
    request: StartRequest,
    digest: str,
    state: str,
    owner: tuple[str, str] | None,
    lease_expires_at: float | None,
    max_run: float,
    park_expiry: float,
    *,
    now: float | None = None,
    on_conflict: bool = False,
    ensure_thread: bool = True,
) -> TurnRecord | None:
    """The turn's row, as the insert returns it (no read after it); None only with
    `on_conflict`, when the turn_id is taken (nothing written)."""
    now = time.time() if now is None else now
    # A QUEUED turn's run clock starts when it is promoted (lifecycle.promote_queued).
    run_deadline = lifecycle.deadline(now, max_run) if state == RUNNING else None
    if request.thread_owner and ensure_thread:
        # A thread made over gRPC or NATS is its maker's, as one made over HTTP is
        # (decision 310); a thread that exists keeps its owner.
        threads.ensure_unread(tx, request.thread_id, {}, now, request.thread_owner)
    conflict = "ON CONFLICT (turn_id) DO NOTHING " if on_conflict else ""
    row = tx.execute(
        "INSERT INTO main.turns (turn_id, thread_id, agent, state, input_json, request_hash, "
        "owner_replica, owner_incarnation, lease_expires_at, created_at, updated_at, "
        "max_run_seconds, park_expiry_seconds, run_deadline_at, graph_fingerprint, graph_label, "
        f"handed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) {conflict}"
        f"RETURNING {TURN_COLUMNS}",
        (
            request.turn_id,
            request.thread_id,
            request.agent,
            state,
            request.input_json,
            digest,
            owner[0] if owner else None,
            owner[1] if owner else None,
            lease_expires_at,
            now,
            now,
            max_run,
            park_expiry,
            run_deadline,
            request.graph_fingerprint if owner else "",
            request.graph_label if owner else "",
            HANDED if owner and request.handed and state == RUNNING else 0,
        ),
    ).fetchone()
    if row is None:
        return None
    turn = TurnRecord(*row)
    if state == RUNNING:
        # The row as inserted: the first fenced write of its owner (a handed turn's
        # first, which takes it) reads no row (decision 662).
        tx.remember_turn(turn)
    return turn
