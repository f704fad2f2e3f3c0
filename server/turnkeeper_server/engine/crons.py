"""The engine's crons: LangGraph API crons and runs due later (journal/crons.py),
committed through the store. Firing them is the LangGraph API's (a fired tick
starts a run as POST /runs does: web/langgraph/crons.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from turnkeeper_server.journal import crons
from turnkeeper_server.journal.crons import CronRecord
from turnkeeper_server.store.contract import Store, Tx


class Crons:
    def __init__(self, db: Store) -> None:
        self.db = db

    async def put(self, record: CronRecord) -> None:
        await self.db.write(lambda tx: crons.put(tx, record))

    async def get(self, cron_id: str) -> CronRecord | None:
        return await self.db.read(lambda conn: crons.get(conn, cron_id))

    async def by_run(self, run_id: str) -> CronRecord | None:
        return await self.db.read(lambda conn: crons.by_run(conn, run_id))

    async def once_on_thread(self, thread_id: str) -> list[CronRecord]:
        return await self.db.read(lambda conn: crons.once_on_thread(conn, thread_id))

    async def all_once(self) -> list[CronRecord]:
        """Every run due later, not started yet, oldest first."""
        return await self.db.read(crons.all_once)

    async def all(self) -> list[CronRecord]:
        return await self.db.read(crons.all_crons)

    async def update(self, cron_id: str, changes: dict[str, Any]) -> CronRecord | None:
        return await self.db.write(lambda tx: crons.update(tx, cron_id, changes, time.time()))

    async def delete(self, cron_id: str) -> bool:
        return await self.db.write(lambda tx: crons.delete(tx, cron_id))

    async def claim_due(
        self, claimer: str, lease: Callable[[CronRecord], float], limit: int
    ) -> tuple[float, list[CronRecord]]:
        """When the claims were made, and the due rows this replica now holds the
        claim of, each for `lease(row)` seconds (each claimed in one statement:
        another replica's claim of the same tick misses)."""
        now = time.time()
        candidates = await self.db.read(lambda conn: crons.due(conn, now, limit))
        if not candidates:
            return now, []

        def op(tx: Tx) -> list[CronRecord]:
            return [c for c in candidates if crons.claim(tx, c, claimer, now, lease(c))]

        return now, await self.db.write(op)

    async def earliest(self) -> float | None:
        """The earliest tick an enabled row owes (None: none)."""
        return await self.db.read(crons.earliest)

    async def advance(
        self,
        cron_id: str,
        claimer: str,
        tick: float,
        next_run_at: float | None,
        *,
        fired: bool,
        error: str = "",
    ) -> bool:
        return await self.db.write(
            lambda tx: crons.advance(
                tx, cron_id, claimer, tick, next_run_at, fired=fired, error=error, now=time.time()
            )
        )

    async def release(self, cron_id: str, claimer: str, tick: float, error: str) -> None:
        await self.db.write(lambda tx: crons.release(tx, cron_id, claimer, tick, error))

    async def finish_once(self, cron_id: str, claimer: str, tick: float) -> bool:
        return await self.db.write(lambda tx: crons.finish_once(tx, cron_id, claimer, tick))
