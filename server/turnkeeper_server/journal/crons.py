"""Crons and runs due later, as the LangGraph API knows them: a row per schedule
(kind ``cron``: a cron expression, a run on each tick) or per run started later
(kind ``once``: a run's ``after_seconds``), with the run body it starts.

``next_run_at`` is the one tick a row owes (NULL: it owes none: a once row that
fired, a cron past its end). A replica fires a due row under a claim, fenced as
a turn's ownership is: ``claim`` takes the tick for ``claimed_by`` until
``claim_expires_at`` (a row whose claim lapsed, its claimer gone, is claimable
again, at the same tick); ``advance`` moves the row on only while the tick is
still the claimed one, so a claimer that lost its claim changes nothing. The run
a tick starts has an id made of the row's id and the tick (`tick_run_id`), so a
tick fired twice (a claimer that died after starting the run, a lapsed claim)
is still one run: starting a turn is idempotent by its id (journal/start.py).

The catch-up rule (docs/langgraph-api.md, decision 331): after firing its tick, a
cron's next tick is the schedule's first one after the moment the tick was
claimed, whatever number of ticks passed before it: a cron that no replica fired
for ten ticks fires once when one comes back, then on schedule. The SQL is plain:
PostgreSQL accepts it too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from turnkeeper_server.store.contract import Conn, Tx

CRON: Final = "cron"
ONCE: Final = "once"
_COLUMNS: Final = (
    "cron_id, kind, assistant_id, thread_id, run_id, schedule, timezone, payload, metadata, "
    "webhook, on_run_completed, end_time, enabled, owner, acts_as, user_id, next_run_at, "
    "claimed_by, claim_expires_at, fired, last_error, created_at, updated_at"
)
_MARKS: Final = ", ".join("?" for _ in _COLUMNS.split(","))
# The namespace of the ids a tick's run and thread are made from.
_TICKS: Final = uuid.UUID("6c1c5c0e-4f5e-4a53-9a55-8f1b0f7a3c21")


@dataclass(frozen=True)
class CronRecord:
    cron_id: str
    kind: str
    assistant_id: str
    thread_id: str | None
    # A once row's run (its id answered at once, pending until it starts).
    run_id: str | None
    schedule: str
    timezone: str | None
    # The run body each firing starts (a POST /runs body).
    payload: dict[str, Any]
    metadata: dict[str, Any]
    # Kept for webhook delivery, passed on to the runs it starts.
    webhook: str | None
    on_run_completed: str | None
    end_time: float | None
    enabled: bool
    # auth.identity of its maker: who sees it (as a thread's owner).
    owner: str
    # The token its runs start under: {"name", "role", "agent"} ({} without tokens).
    acts_as: dict[str, Any]
    # Its maker's end user (a langgraph.json's auth), LangGraph's user_id.
    user_id: str | None
    next_run_at: float | None
    created_at: float
    updated_at: float
    claimed_by: str | None = None
    claim_expires_at: float | None = None
    fired: int = 0
    last_error: str = ""


def tick_run_id(cron_id: str, tick: float) -> str:
    """The run a cron's tick starts (the same for every replica that fires it)."""
    return str(uuid.uuid5(_TICKS, f"{cron_id}/run/{tick!r}"))


def tick_thread_id(cron_id: str, tick: float) -> str:
    """The thread a thread-less cron's tick makes for its run."""
    return str(uuid.uuid5(_TICKS, f"{cron_id}/thread/{tick!r}"))


def _object(text: Any) -> dict[str, Any]:
    value = json.loads(text) if text else {}
    return value if isinstance(value, dict) else {}


def _record(row: Any) -> CronRecord:
    return CronRecord(
        cron_id=row[0],
        kind=row[1],
        assistant_id=row[2],
        thread_id=row[3],
        run_id=row[4],
        schedule=row[5],
        timezone=row[6],
        payload=_object(row[7]),
        metadata=_object(row[8]),
        webhook=row[9],
        on_run_completed=row[10],
        end_time=row[11],
        enabled=bool(row[12]),
        owner=row[13],
        acts_as=_object(row[14]),
        user_id=row[15],
        next_run_at=row[16],
        claimed_by=row[17],
        claim_expires_at=row[18],
        fired=int(row[19]),
        last_error=row[20],
        created_at=row[21],
        updated_at=row[22],
    )


def put(tx: Tx, record: CronRecord) -> None:
    tx.execute(
        f"INSERT INTO main.crons ({_COLUMNS}) VALUES ({_MARKS})",
        (
            record.cron_id,
            record.kind,
            record.assistant_id,
            record.thread_id,
            record.run_id,
            record.schedule,
            record.timezone,
            json.dumps(record.payload),
            json.dumps(record.metadata),
            record.webhook,
            record.on_run_completed,
            record.end_time,
            1 if record.enabled else 0,
            record.owner,
            json.dumps(record.acts_as),
            record.user_id,
            record.next_run_at,
            None,
            None,
            0,
            "",
            record.created_at,
            record.updated_at,
        ),
    )


def get(conn: Conn, cron_id: str) -> CronRecord | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM main.crons WHERE cron_id = ?", (cron_id,)
    ).fetchone()
    return None if row is None else _record(row)


def by_run(conn: Conn, run_id: str) -> CronRecord | None:
    """The once row of a run not started yet (None: there is none)."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM main.crons WHERE kind = 'once' AND run_id = ?", (run_id,)
    ).fetchone()
    return None if row is None else _record(row)


def once_on_thread(conn: Conn, thread_id: str) -> list[CronRecord]:
    """A thread's runs due later, not started yet, newest first."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM main.crons WHERE kind = 'once' AND thread_id = ? "
        "ORDER BY created_at DESC",
        (thread_id,),
    ).fetchall()
    return [_record(r) for r in rows]


def all_once(conn: Conn) -> list[CronRecord]:
    """Every run due later, not started yet, oldest first."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM main.crons WHERE kind = 'once' ORDER BY created_at, cron_id"
    ).fetchall()
    return [_record(r) for r in rows]


def all_crons(conn: Conn) -> list[CronRecord]:
    """Every cron (not the once rows), oldest first: a search filters, sorts and
    pages them here, as assistants' (they are few: one per schedule someone made)."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM main.crons WHERE kind = 'cron' ORDER BY created_at, cron_id"
    ).fetchall()
    return [_record(r) for r in rows]


def update(tx: Tx, cron_id: str, changes: dict[str, Any], now: float) -> CronRecord | None:
    """The cron with `changes` (column → value; payload and metadata as dicts, the
    caller merged them), its claim kept. None when there is none."""
    if not changes:
        return get(tx.conn, cron_id)
    encoded = {
        k: json.dumps(v) if k in ("payload", "metadata") else (int(v) if k == "enabled" else v)
        for k, v in changes.items()
    }
    sets = ", ".join(f"{k} = ?" for k in encoded)
    done = tx.execute(
        f"UPDATE main.crons SET {sets}, updated_at = ? WHERE cron_id = ? AND kind = 'cron'",
        (*encoded.values(), now, cron_id),
    )
    return get(tx.conn, cron_id) if done.rowcount else None


def delete(tx: Tx, cron_id: str) -> bool:
    done = tx.execute("DELETE FROM main.crons WHERE cron_id = ?", (cron_id,))
    return bool(done.rowcount)


def delete_for_threads(tx: Tx, thread_ids: Sequence[str]) -> None:
    """The crons and waiting runs of these threads (the threads are being deleted)."""
    for thread_id in thread_ids:
        tx.execute("DELETE FROM main.crons WHERE thread_id = ?", (thread_id,))


def due(conn: Conn, now: float, limit: int) -> list[CronRecord]:
    """Enabled rows whose tick has come and that nobody holds a live claim on."""
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM main.crons WHERE enabled = 1 AND next_run_at <= ? "
        "AND (claimed_by IS NULL OR claim_expires_at < ?) ORDER BY next_run_at LIMIT ?",
        (now, now, limit),
    ).fetchall()
    return [_record(r) for r in rows]


def earliest(conn: Conn) -> float | None:
    row = conn.execute("SELECT min(next_run_at) FROM main.crons WHERE enabled = 1").fetchone()
    return None if row is None or row[0] is None else float(row[0])


def claim(tx: Tx, record: CronRecord, claimer: str, now: float, lease: float) -> bool:
    """Take `record`'s tick for `claimer` until now + lease, if it is still that tick
    and nobody else holds a live claim on it (one statement: on PostgreSQL a
    concurrent claimer re-reads the row after the winner's commit and misses)."""
    done = tx.execute(
        "UPDATE main.crons SET claimed_by = ?, claim_expires_at = ? "
        "WHERE cron_id = ? AND enabled = 1 AND next_run_at = ? "
        "AND (claimed_by IS NULL OR claim_expires_at < ?)",
        (claimer, now + lease, record.cron_id, record.next_run_at, now),
    )
    return bool(done.rowcount)


def advance(
    tx: Tx,
    cron_id: str,
    claimer: str,
    tick: float,
    next_run_at: float | None,
    *,
    fired: bool,
    error: str,
    now: float,
) -> bool:
    """Move the row past the tick `claimer` claimed (`next_run_at` None: it owes no
    more), its claim released; False, and nothing changed, when the claim is not
    `claimer`'s on that tick any more (fenced: a claimer that was too slow)."""
    done = tx.execute(
        "UPDATE main.crons SET next_run_at = ?, claimed_by = NULL, claim_expires_at = NULL, "
        "fired = fired + ?, last_error = ?, updated_at = ? "
        "WHERE cron_id = ? AND claimed_by = ? AND next_run_at = ?",
        (next_run_at, 1 if fired else 0, error, now, cron_id, claimer, tick),
    )
    return bool(done.rowcount)


def release(tx: Tx, cron_id: str, claimer: str, tick: float, error: str) -> None:
    """Give the claimed tick back (its run could not start now: tried again)."""
    tx.execute(
        "UPDATE main.crons SET claimed_by = NULL, claim_expires_at = NULL, last_error = ? "
        "WHERE cron_id = ? AND claimed_by = ? AND next_run_at = ?",
        (error, cron_id, claimer, tick),
    )


def finish_once(tx: Tx, cron_id: str, claimer: str, tick: float) -> bool:
    """A once row whose run started: deleted (the run is a turn now), if the claim
    is still `claimer`'s."""
    done = tx.execute(
        "DELETE FROM main.crons WHERE cron_id = ? AND claimed_by = ? AND next_run_at = ?",
        (cron_id, claimer, tick),
    )
    return bool(done.rowcount)
