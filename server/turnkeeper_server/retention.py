"""Retention: what a finished turn leaves behind is deleted once it is old enough.

With `--retention DURATION`, a sweeper pass (every `retention_interval` seconds)
takes turns that ended (DONE, FAILED, CANCELLED) longer ago than the retention,
deletes their retained events, their effects (the ledger is part of the turn's
record, as its events are) and any outbox row still held for them, marks them
pruned (the turn row itself stays: TurnStatus and GetTurn still answer), and prunes
the checkpoints of their threads to the latest of each namespace, unless the thread
has a live or queued turn again. Then it gives the freed pages back to the file
system where the backend does that on request (`Store.reclaim`: SQLite's
`PRAGMA incremental_vacuum`, the files being created with auto_vacuum=INCREMENTAL;
on PostgreSQL autovacuum makes the dead rows' space reusable on its own).

Written once over the store contract: on PostgreSQL the batch's turn rows are
taken `FOR UPDATE SKIP LOCKED`, so replicas sweeping at once share the work.

With `--turn-retention DURATION` as well (or alone), the same pass then deletes
the finished turns older than that horizon, rows and all (journal/horizon.py).

Each pass works in batches, one transaction each, so the writer thread is never
held for long.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from turnkeeper_server.journal import effects, horizon, maintenance
from turnkeeper_server.periodic import Periodic
from turnkeeper_server.records import ENDED_SQL, Policy
from turnkeeper_server.store.contract import Store, Tx

log = logging.getLogger(__name__)

BATCH = 200


@dataclass(frozen=True)
class Swept:
    turns: int
    events: int
    checkpoints: int
    # Past the turn horizon: turn rows deleted, and threads erased with their last turn.
    turns_deleted: int = 0
    threads_erased: int = 0


def sweep_batch(tx: Tx, *, cutoff: float, policy: Policy, limit: int = BATCH) -> Swept:
    rows = tx.execute(
        "SELECT turn_id, thread_id FROM main.turns WHERE pruned = 0 "
        f"AND state IN {ENDED_SQL} AND updated_at < ? "
        f"ORDER BY updated_at LIMIT ?{tx.skip_locked}",
        (cutoff, limit),
    ).fetchall()
    if not rows:
        return Swept(0, 0, 0)
    ids = [r[0] for r in rows]
    marks = ", ".join("?" for _ in ids)
    events = tx.execute(f"DELETE FROM main.events WHERE turn_id IN ({marks})", ids).rowcount
    effects.delete_for_turns(tx, ids)
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
    def __init__(
        self,
        db: Store,
        policy: Policy,
        retention: float,
        interval: float,
        turn_retention: float = 0.0,
    ) -> None:
        self.db = db
        self.policy = policy
        self.retention = retention
        self.turn_retention = turn_retention
        self._periodic = Periodic("retention", interval, self._pass, log)

    async def start(self) -> None:
        if self.retention > 0 or self.turn_retention > 0:
            self._periodic.start()

    async def _pass(self) -> None:
        await self.sweep()

    async def sweep(self, now: float | None = None) -> Swept:
        """One whole pass, as at `now` (the clock when None); returns what it deleted.
        A retention of 0 is off, even when a pass is asked for."""
        now = time.time() if now is None else now
        total = Swept(0, 0, 0)
        if self.retention > 0:
            total = await self._prune(now - self.retention)
        deleted, erased = 0, 0
        if self.turn_retention > 0:
            cutoff = now - self.turn_retention
            while True:
                batch = await self.db.write(
                    lambda tx: horizon.delete_batch(
                        tx, cutoff=cutoff, policy=self.policy, limit=BATCH
                    )
                )
                deleted, erased = deleted + batch.turns, erased + batch.threads
                if batch.turns < BATCH:
                    break
            total = Swept(total.turns, total.events, total.checkpoints, deleted, erased)
        on = [r for r in (self.retention, self.turn_retention) if r > 0]
        if on:
            # Rewind notices NATS never took go with the shorter horizon.
            rewinds = now - min(on)
            await self.db.write(lambda tx: sweep_rewinds(tx, cutoff=rewinds, policy=self.policy))
        if total.turns or total.turns_deleted:
            await self.db.reclaim()
        if total.turns_deleted:
            log.info(
                "turn retention: %d finished turns deleted (%d threads with them)",
                total.turns_deleted,
                total.threads_erased,
            )
        return total

    async def _prune(self, cutoff: float) -> Swept:
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
        if total.turns:
            log.info(
                "retention: %d finished turns pruned (%d events, %d checkpoints)",
                total.turns,
                total.events,
                total.checkpoints,
            )
        return total

    async def stop(self) -> None:
        await self._periodic.stop()
