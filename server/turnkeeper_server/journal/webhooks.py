"""Webhooks of LangGraph API runs, as rows: a delivery per run and each attempt at it.

A run created with a ``webhook`` gets a delivery row with its run record
(`subscribe`, beside journal/runs.py's `put`): ``waiting`` while the run goes on.
The transaction that ends the run (its turn PARKED, DONE, FAILED or CANCELLED:
`run_ended`, called by the one writer of terminal events and by the park) makes it
``pending``, so a crash between the end and the delivery loses nothing: the outbox
pattern, as NATS messages are written (store/outbox_rows.py). A run that ended
before its record was written (a fast graph) is ``pending`` from `subscribe` on;
both take the turn's row lock, so on PostgreSQL one of the two sees the other.

Deliverers (webhooks/delivery.py, on every replica) `claim` due rows for a while
(``claim_expires_at``, the fence of an attempt: a replica killed mid-attempt leaves
the row to be claimed again when it passes), record each attempt's start and
outcome here, and end the row ``delivered``, ``refused`` (an address the operator
has not allowed) or ``failed`` (attempts used up). A run's first end is the one
delivered: a turn resumed through ResumeDetached after its park does not deliver
again. The SQL is plain: PostgreSQL accepts it too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Final

from turnkeeper_server.records import CANCELLED, DONE, FAILED, PARKED
from turnkeeper_server.store.contract import Conn, Tx

WAITING: Final = "waiting"
PENDING: Final = "pending"
DELIVERED: Final = "delivered"
REFUSED: Final = "refused"
FAILED_DELIVERY: Final = "failed"
# A turn in one of these states has ended its run, as a webhook sees it.
RUN_ENDS: Final = (PARKED, DONE, FAILED, CANCELLED)

_COLUMNS: Final = (
    "turn_id, thread_id, url, state, run_state, attempts, next_attempt_at, "
    "claimed_by, claim_expires_at, payload, last_error, created_at, ended_at, updated_at"
)
_ATTEMPT_COLUMNS: Final = (
    "turn_id, attempt, replica, started_at, finished_at, outcome, http_status, detail"
)


@dataclass(frozen=True)
class Delivery:
    turn_id: str
    thread_id: str
    url: str
    state: str
    # The turn's state when the run ended (PARKED, DONE, FAILED, CANCELLED); '' while
    # it waits.
    run_state: str
    attempts: int
    next_attempt_at: float | None
    claimed_by: str | None
    claim_expires_at: float | None
    # The body, built at the first attempt and sent the same at every retry.
    payload: str | None
    last_error: str
    created_at: float
    ended_at: float | None
    updated_at: float


@dataclass(frozen=True)
class Attempt:
    turn_id: str
    attempt: int
    replica: str
    started_at: float
    # None while it is in flight (or when its replica died during it).
    finished_at: float | None
    # 'delivered', 'retry', 'refused', 'failed'; '' in flight.
    outcome: str
    http_status: int | None
    detail: str


def subscribe(tx: Tx, turn_id: str, url: str) -> None:
    """The run `turn_id` is delivered to `url` when it ends (at once if it has)."""
    row = tx.execute(
        f"SELECT thread_id, state FROM main.turns WHERE turn_id = ?{tx.for_update}", (turn_id,)
    ).fetchone()
    if row is None:
        return  # erased before its record was written: nothing to tell anyone
    thread_id, state = row
    now = time.time()
    ended = state in RUN_ENDS
    tx.execute(
        "INSERT INTO main.webhook_deliveries (turn_id, thread_id, url, state, run_state, "
        "next_attempt_at, created_at, ended_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (turn_id) DO NOTHING",
        (
            turn_id,
            thread_id,
            url,
            PENDING if ended else WAITING,
            state if ended else "",
            now if ended else None,
            now,
            now if ended else None,
            now,
        ),
    )


def run_ended(tx: Tx, turn_id: str, state: str, now: float) -> None:
    """Called in the transaction that ends the turn's run (`state`): its delivery, if
    it has one waiting, becomes due now. One UPDATE by primary key; no row for a
    turn without a webhook."""
    tx.execute(
        "UPDATE main.webhook_deliveries SET state = ?, run_state = ?, next_attempt_at = ?, "
        "ended_at = ?, updated_at = ? WHERE turn_id = ? AND state = ?",
        (PENDING, state, now, now, now, turn_id, WAITING),
    )


def claim(tx: Tx, *, replica: str, now: float, hold: float, limit: int) -> list[Delivery]:
    """Up to `limit` due deliveries nobody holds, held by `replica` for `hold` seconds;
    each has its attempt row written (in flight), so an attempt cut short by a crash
    is still seen. Replicas claiming at once skip each other's rows."""
    rows = tx.execute(
        f"SELECT {_COLUMNS} FROM main.webhook_deliveries WHERE state = ? "
        "AND next_attempt_at <= ? AND (claim_expires_at IS NULL OR claim_expires_at < ?) "
        f"ORDER BY next_attempt_at LIMIT ?{tx.skip_locked}",
        (PENDING, now, now, limit),
    ).fetchall()
    claimed: list[Delivery] = []
    for row in rows:
        found = Delivery(*row)
        attempt = found.attempts + 1
        tx.execute(
            "UPDATE main.webhook_deliveries SET attempts = ?, claimed_by = ?, "
            "claim_expires_at = ?, updated_at = ? WHERE turn_id = ?",
            (attempt, replica, now + hold, now, found.turn_id),
        )
        tx.execute(
            f"INSERT INTO main.webhook_attempts ({_ATTEMPT_COLUMNS}) "
            "VALUES (?, ?, ?, ?, NULL, '', NULL, '')",
            (found.turn_id, attempt, replica, now),
        )
        claimed.append(
            replace(found, attempts=attempt, claimed_by=replica, claim_expires_at=now + hold)
        )
    return claimed


def save_payload(tx: Tx, turn_id: str, payload: str) -> None:
    """The body built at the first attempt, kept for the retries."""
    tx.execute(
        "UPDATE main.webhook_deliveries SET payload = ? WHERE turn_id = ? AND payload IS NULL",
        (payload, turn_id),
    )


def finish_attempt(
    tx: Tx,
    *,
    turn_id: str,
    attempt: int,
    replica: str,
    outcome: str,
    http_status: int | None,
    detail: str,
    retry_at: float | None,
    now: float,
) -> bool:
    """Record attempt `attempt`'s outcome and what follows it: ``delivered``,
    ``refused`` and ``failed`` end the delivery; ``retry`` makes it due at
    `retry_at`. Fenced: False (nothing written) when the claim passed and another
    replica took the row since."""
    row = tx.execute(
        f"SELECT attempts, claimed_by, state FROM main.webhook_deliveries WHERE turn_id = ?"
        f"{tx.for_update}",
        (turn_id,),
    ).fetchone()
    if row is None or (row[0], row[1], row[2]) != (attempt, replica, PENDING):
        return False
    tx.execute(
        "UPDATE main.webhook_attempts SET finished_at = ?, outcome = ?, http_status = ?, "
        "detail = ? WHERE turn_id = ? AND attempt = ?",
        (now, outcome, http_status, detail[:500], turn_id, attempt),
    )
    state = PENDING if outcome == "retry" else outcome
    tx.execute(
        "UPDATE main.webhook_deliveries SET state = ?, next_attempt_at = ?, claimed_by = NULL, "
        "claim_expires_at = NULL, last_error = ?, updated_at = ? WHERE turn_id = ?",
        (
            state,
            retry_at if outcome == "retry" else None,
            "" if outcome == DELIVERED else detail[:500],
            now,
            turn_id,
        ),
    )
    return True


def release(tx: Tx, *, replica: str, now: float) -> int:
    """A replica stopping: the deliveries it holds are due again now, their attempts
    in flight recorded as cut short (retried). Returns how many it held."""
    held = tx.execute(
        "SELECT turn_id, attempts FROM main.webhook_deliveries WHERE claimed_by = ? "
        f"AND state = ?{tx.for_update}",
        (replica, PENDING),
    ).fetchall()
    for turn_id, attempt in held:
        tx.execute(
            "UPDATE main.webhook_attempts SET finished_at = ?, outcome = 'retry', "
            "detail = ? WHERE turn_id = ? AND attempt = ? AND finished_at IS NULL",
            (now, "the service stopped during the attempt", turn_id, attempt),
        )
        tx.execute(
            "UPDATE main.webhook_deliveries SET claimed_by = NULL, claim_expires_at = NULL, "
            "next_attempt_at = ?, updated_at = ? WHERE turn_id = ?",
            (now, now, turn_id),
        )
    return len(held)


def get(conn: Conn, turn_id: str) -> Delivery | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM main.webhook_deliveries WHERE turn_id = ?", (turn_id,)
    ).fetchone()
    return Delivery(*row) if row else None


def attempts(conn: Conn, turn_id: str) -> list[Attempt]:
    rows = conn.execute(
        f"SELECT {_ATTEMPT_COLUMNS} FROM main.webhook_attempts WHERE turn_id = ? ORDER BY attempt",
        (turn_id,),
    ).fetchall()
    return [Attempt(*r) for r in rows]


def next_due(conn: Conn) -> float | None:
    """When the earliest pending delivery falls due (None: none pending)."""
    row = conn.execute(
        "SELECT min(next_attempt_at) FROM main.webhook_deliveries WHERE state = ?", (PENDING,)
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def delete_for_turns(tx: Tx, turn_ids: list[str]) -> None:
    """These turns' deliveries and attempts (their turns are being deleted: an
    erased thread's run is not told to anyone afterwards)."""
    if not turn_ids:
        return
    marks = ", ".join("?" for _ in turn_ids)
    tx.execute(f"DELETE FROM main.webhook_attempts WHERE turn_id IN ({marks})", turn_ids)
    tx.execute(f"DELETE FROM main.webhook_deliveries WHERE turn_id IN ({marks})", turn_ids)
