"""Retention: what a finished turn leaves behind is deleted once it is old enough.

With `--retention DURATION`, a sweeper pass (every `retention_interval` seconds)
takes turns that ended (DONE, FAILED, CANCELLED) longer ago than the retention,
deletes their retained events and any outbox row still held for them, marks them
pruned (the turn row itself stays: TurnStatus and GetTurn still answer), and prunes
the checkpoints of their threads to the latest of each namespace, unless the thread
has a live or queued turn again. Then it gives the freed pages back to the file
system where the backend does that on request (`Store.reclaim`: SQLite's
`PRAGMA incremental_vacuum`, the files being created with auto_vacuum=INCREMENTAL;
on PostgreSQL autovacuum makes the dead rows' space reusable on its own).

Written once over the store contract: on PostgreSQL the batch's turn rows are
taken `FOR UPDATE SKIP LOCKED`, so replicas sweeping at once share the work.

Each pass works in batches, one transaction each, so the writer thread is never
held for long.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from turnkeeper_server.journal import maintenance
from turnkeeper_server.journal.records import Policy
from turnkeeper_server.store.contract import Store, Tx

log = logging.getLogger(__name__)

BATCH = 200


@dataclass(frozen=True)
class Swept:
    turns: int
    events: int
    checkpoints: int


def sweep_batch(tx: Tx, *, cutoff: float, policy: Policy, limit: int = BATCH) -> Swept:
    rows = tx.execute(
        "SELECT turn_id, thread_id FROM main.turns WHERE pruned = 0 "
        "AND state IN ('DONE','FAILED','CANCELLED') AND updated_at < ? "
        f"ORDER BY updated_at LIMIT ?{tx.skip_locked}",
        (cutoff, limit),
    ).fetchall()
    if not rows:
        return Swept(0, 0, 0)
    ids = [r[0] for r in rows]
    marks = ", ".join("?" for _ in ids)
    events = tx.execute(f"DELETE FROM main.events WHERE turn_id IN ({marks})", ids).rowcount
    tx.execute(
        f"DELETE FROM main.outbox WHERE subject IN ({marks})",
        [policy.events_subject(turn_id) for turn_id in ids],
    )
    tx.execute(f"UPDATE main.turns SET pruned = 1 WHERE turn_id IN ({marks})", ids)
    threads = list(dict.fromkeys(r[1] for r in rows))
    live = set(maintenance.live_threads(tx, threads))
    checkpoints = sum(
        maintenance.prune_thread(tx, thread_id, maintenance.KEEP_LATEST)
        for thread_id in threads
        if thread_id not in live
    )
    return Swept(len(ids), events, checkpoints)


def sweep_rewinds(tx: Tx, *, cutoff: float, policy: Policy) -> None:
    """Rewind notices NATS never took (it was away longer than the retention)."""
    tx.execute(
        "DELETE FROM main.outbox WHERE subject = ? AND created_at < ?",
        (policy.rewind_subject, cutoff),
    )


class RetentionSweeper:
    def __init__(self, db: Store, policy: Policy, retention: float, interval: float) -> None:
        self.db = db
        self.policy = policy
        self.retention = retention
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self.retention > 0:
            self._task = asyncio.create_task(self._run(), name="retention")

    async def sweep(self) -> Swept:
        """One whole pass; returns what it deleted."""
        cutoff = time.time() - self.retention
        total = Swept(0, 0, 0)
        while True:
            swept = await self.db.write(
                lambda tx: sweep_batch(tx, cutoff=cutoff, policy=self.policy)
            )
            total = Swept(
                total.turns + swept.turns,
                total.events + swept.events,
                total.checkpoints + swept.checkpoints,
            )
            if swept.turns < BATCH:
                break
        await self.db.write(lambda tx: sweep_rewinds(tx, cutoff=cutoff, policy=self.policy))
        if total.turns:
            await self.db.reclaim()
            log.info(
                "retention: %d finished turns pruned (%d events, %d checkpoints)",
                total.turns,
                total.events,
                total.checkpoints,
            )
        return total

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("retention pass failed; retrying next interval")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
