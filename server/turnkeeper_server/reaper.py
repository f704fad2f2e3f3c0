"""The lease reaper: re-drives RUNNING turns whose owner stopped heartbeating.

This is what recovers a turn when its replica never comes back (the startup
Redrive only helps when the same replica restarts). Each pass is the engine's
`Turns.reap`: it asks the owners of lapsed leases over NATS whether they still run
those turns (a late heartbeat is no death, decision 382), then one transaction, and
the hand-offs to live replicas after it commits.
The reaper sits below the engine: it is given the pass to run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.logs import turn_log
from turnkeeper_server.periodic import Periodic

log = logging.getLogger(__name__)


class LeaseReaper:
    """Each pass re-drives the turns whose lease lapsed. After a pass that came late
    (this service's event loop was held longer than an interval: a saturated
    machine), heartbeats sent meanwhile may still wait unread behind it; for a whole
    lease from then on, only leases that lapsed before the loop was held are taken,
    so a busy service does not declare a live agent dead (decision 320)."""

    def __init__(
        self,
        reap: Callable[[float | None], Awaitable[Sequence[Redriven]]],
        interval: float,
        lease: float = 15.0,
    ) -> None:
        self.reap = reap
        self.interval = interval
        self.lease = lease
        self._periodic = Periodic("lease-reaper", interval, self._pass, log)
        self._due = 0.0
        # (wall-clock time the loop began to be held, monotonic end of the grace).
        self._held: tuple[float, float] | None = None

    async def start(self) -> None:
        self._due = time.monotonic() + self.interval
        self._periodic.start()

    def expired_before(self) -> float | None:
        """The bound on the leases this pass may take; None: any that lapsed."""
        now = time.monotonic()
        late = now - self._due
        if late > self.interval:
            began = time.time() - late
            log.warning(
                "the service's event loop was held for %.1f s: leases that lapsed "
                "meanwhile wait a whole lease (%g s) for their heartbeats",
                late,
                self.lease,
            )
            earliest = began if self._held is None else min(began, self._held[0])
            self._held = (earliest, now + self.lease)
        if self._held is not None and now >= self._held[1]:
            self._held = None
        return None if self._held is None else self._held[0]

    async def _pass(self) -> None:
        try:
            redriven = await self.reap(self.expired_before())
        finally:
            self._due = time.monotonic() + self.interval
        # Re-drives and failures at the cap are logged by the engine; this is the rest.
        for r in redriven:
            if not (r.rewound or r.failed_at_cap):
                turn_log(log, r.turn.turn_id, r.turn.attempts).info(
                    "nobody claimed it in time: handed out again"
                )

    async def stop(self) -> None:
        await self._periodic.stop()
