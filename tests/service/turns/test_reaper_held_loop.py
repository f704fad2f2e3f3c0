"""A service whose own event loop was held (a saturated machine) does not take the
leases that lapsed meanwhile for dead agents (decision 320): their heartbeats may
wait unread behind the hold. Leases that lapsed before it are taken as ever."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.reaper import LeaseReaper

from tests.support.service import ServiceFactory
from tests.support.turns import start


async def test_the_pass_after_a_held_loop_takes_only_leases_that_lapsed_before_it() -> None:
    bounds: list[float | None] = []
    passed = asyncio.Event()

    async def reap(expired_before: float | None) -> Sequence[Redriven]:
        bounds.append(expired_before)
        passed.set()
        return []

    interval = 0.05
    reaper = LeaseReaper(reap, interval, lease=3600)
    await reaper.start()
    try:
        await passed.wait()
        passed.clear()
        assert bounds == [None]  # on time: any lapsed lease
        # The loop held for many intervals by CPU-bound work, as a saturated
        # machine holds it.
        end = time.monotonic() + 20 * interval
        while time.monotonic() < end:
            pass
        held_until = time.time()
        await passed.wait()
        passed.clear()
        bound = bounds[-1]
        # Only leases that lapsed before the hold began, not those while it lasted.
        assert bound is not None and bound < held_until
        # And for the lease after it, passes on time keep that bound.
        await passed.wait()
        assert bounds[-1] == bound
    finally:
        await reaper.stop()


@pytest.mark.both_backends
async def test_a_lease_that_lapsed_during_the_hold_is_spared_one_before_it_is_taken(
    make_service: ServiceFactory,
) -> None:
    # The service's own reaper out of the way: the test runs the passes.
    service = await make_service(lease_seconds=0.001, reap_interval=3600)
    async with aio.insecure_channel(service.address) as ch:
        turns = turns_pb2_grpc.TurnServiceStub(ch)
        before = time.time()
        await start(turns, turn_id="t1")
        # Its lease lapsed after `before`: a pass bounded by `before` spares it.
        assert await service.engine.turns.reap(expired_before=before) == []
        status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))
        assert status.attempts == 0
        # Unbounded, it is re-driven (its agent never heartbeat).
        redriven = await service.engine.turns.reap()
        assert [r.turn.turn_id for r in redriven] == ["t1"]
