"""A service whose own event loop was held (a saturated machine) does not take the
leases that lapsed meanwhile for dead agents (decision 320): their heartbeats may
wait unread behind the hold. Leases that lapsed before it are taken as ever."""

from __future__ import annotations

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


def test_a_pass_after_a_held_loop_takes_only_leases_that_lapsed_before_the_hold() -> None:
    async def reap(expired_before: float | None) -> Sequence[Redriven]:
        return []

    reaper = LeaseReaper(reap, interval=1.0, lease=3600)
    # A pass on time (its due time ahead, as start() sets it): any lapsed lease.
    reaper._due = time.monotonic() + reaper.interval
    assert reaper.expired_before() is None
    # A pass five intervals late: the loop was held, by CPU-bound work or a
    # saturated machine, since about five seconds ago.
    reaper._due = time.monotonic() - 5 * reaper.interval
    bound = reaper.expired_before()
    assert bound is not None and bound <= time.time() - 5 * reaper.interval
    # Passes on time within the lease after it keep the bound.
    reaper._due = time.monotonic() + reaper.interval
    assert reaper.expired_before() == bound


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
