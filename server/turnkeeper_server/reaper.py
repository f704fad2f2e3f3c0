"""The lease reaper: re-drives RUNNING turns whose owner stopped heartbeating.

This is what recovers a turn when its replica never comes back (the startup
Redrive only helps when the same replica restarts). Each pass is the engine's
`Turns.reap`: one transaction, and the hand-offs to live replicas after it commits.
The reaper sits below the engine: it is given the pass to run.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.logs import turn_log
from turnkeeper_server.periodic import Periodic

log = logging.getLogger(__name__)


class LeaseReaper:
    def __init__(self, reap: Callable[[], Awaitable[Sequence[Redriven]]], interval: float) -> None:
        self.reap = reap
        self._periodic = Periodic("lease-reaper", interval, self._pass, log)

    async def start(self) -> None:
        self._periodic.start()

    async def _pass(self) -> None:
        redriven = await self.reap()
        # Re-drives and failures at the cap are logged by the engine; this is the rest.
        for r in redriven:
            if not (r.rewound or r.failed_at_cap):
                turn_log(log, r.turn.turn_id, r.turn.attempts).info(
                    "nobody claimed it in time: handed out again"
                )

    async def stop(self) -> None:
        await self._periodic.stop()
