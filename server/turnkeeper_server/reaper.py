"""The lease reaper: re-drives RUNNING turns whose owner stopped heartbeating.

This is what recovers a turn when its replica never comes back (the startup
Redrive only helps when the same replica restarts). Each pass is one transaction;
the hand-offs to live replicas happen after it commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from turnkeeper_server.engine import Engine
from turnkeeper_server.logs import turn_log

log = logging.getLogger(__name__)


class LeaseReaper:
    def __init__(self, engine: Engine, interval: float) -> None:
        self.engine = engine
        self.interval = interval
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="lease-reaper")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                redriven = await self.engine.reap()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease reaper pass failed; retrying next interval")
                continue
            # Re-drives and failures at the cap are logged by the engine; this is the rest.
            for r in redriven:
                if not (r.rewound or r.failed_at_cap):
                    turn_log(log, r.turn.turn_id, r.turn.attempts).info(
                        "nobody claimed it in time: handed out again"
                    )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
