"""LeaseKeeper against a slow service (issue 51, decision 384): a heartbeat may take
what is left of its lease, heartbeats of different turns do not wait for each other,
and a lease that lapsed because the service answered late is kept (the service asks
before it re-drives); one that lapsed because the service could not be reached is
given up, as before."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import grpc
import pytest
from turnkeeper.agent.bridge import _lease
from turnkeeper.agent.bridge._lease import LeaseKeeper
from turnkeeper.client import ConnectionOptions
from turnkeeper.errors import TurnkeeperError
from turnkeeper.v1 import turns_pb2

pytestmark = [pytest.mark.timeout(60)]

LEASE = 0.6


class SlowService:
    """Answers each heartbeat after `delay`, or fails it with `code`; counts them."""

    delay = 0.0
    code: grpc.StatusCode | None = None
    slow_turns: frozenset[str] = frozenset()

    def __init__(self, options: ConnectionOptions) -> None:
        self.calls: dict[str, int] = {}
        self.lock = threading.Lock()
        self.beat = threading.Event()

    def heartbeat(self, request: turns_pb2.HeartbeatRequest, timeout: float) -> None:
        with self.lock:
            self.calls[request.turn_id] = self.calls.get(request.turn_id, 0) + 1
        self.beat.set()
        if self.code is not None:
            raise TurnkeeperError(self.code, "as told", rpc="Heartbeat")
        if request.turn_id in self.slow_turns:
            # Later than a third of the lease, within the lease.
            if self.delay > timeout:
                raise TurnkeeperError(grpc.StatusCode.DEADLINE_EXCEEDED, "late", rpc="Heartbeat")
            time.sleep(self.delay)

    def close(self) -> None:
        pass


@pytest.fixture
def service(monkeypatch: pytest.MonkeyPatch) -> type[SlowService]:
    monkeypatch.setattr(_lease, "TurnkeeperClient", SlowService)
    return SlowService


async def held(keeper: LeaseKeeper, turn_id: str, lapsed: list[str]) -> None:
    keeper.hold(
        turns_pb2.HeartbeatRequest(turn_id=turn_id, attempt=0, replica="r", incarnation="i"),
        LEASE,
        on_refused=lambda exc: lapsed.append(f"refused {exc}"),
        on_lapsed=lapsed.append,
    )


async def beats(keeper: LeaseKeeper, turn_id: str, n: int) -> None:
    """Until `turn_id` had `n` heartbeats sent."""
    client: Any = keeper._client

    def enough() -> bool:
        while client.calls.get(turn_id, 0) < n:
            client.beat.wait()
            client.beat.clear()
        return True

    await asyncio.wait_for(asyncio.to_thread(enough), 30)


@pytest.mark.parametrize(
    ("code", "given_up"),
    [
        pytest.param(grpc.StatusCode.DEADLINE_EXCEEDED, False, id="late-answers-keep-it"),
        pytest.param(grpc.StatusCode.UNAVAILABLE, True, id="unreachable-gives-it-up"),
    ],
)
async def test_a_lease_is_given_up_only_when_the_service_cannot_be_reached(
    service: type[SlowService],
    monkeypatch: pytest.MonkeyPatch,
    code: grpc.StatusCode,
    given_up: bool,
) -> None:
    monkeypatch.setattr(SlowService, "code", code)
    keeper = LeaseKeeper(ConnectionOptions())
    lapsed: list[str] = []
    gone = asyncio.Event()

    def on_lapsed(why: str) -> None:
        lapsed.append(why)
        gone.set()

    try:
        keeper.hold(
            turns_pb2.HeartbeatRequest(turn_id="t", attempt=0, replica="r", incarnation="i"),
            LEASE,
            on_refused=lambda exc: None,
            on_lapsed=on_lapsed,
        )
        if given_up:
            await asyncio.wait_for(gone.wait(), 30)
            assert "the lease lapsed" in lapsed[0]
        else:
            # Failing heartbeats for several leases: still held, still sent.
            await beats(keeper, "t", int(3 * LEASE / (LEASE / 3)) + 3)
            assert lapsed == []
    finally:
        await asyncio.to_thread(keeper.close)


async def test_one_slow_answer_holds_up_no_other_turns_heartbeats(
    service: type[SlowService], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The slow turn's answers take half the lease (more than its third).
    monkeypatch.setattr(SlowService, "slow_turns", frozenset({"slow"}))
    monkeypatch.setattr(SlowService, "delay", LEASE / 2)
    keeper = LeaseKeeper(ConnectionOptions())
    lapsed: list[str] = []
    try:
        await held(keeper, "slow", lapsed)
        await held(keeper, "quick", lapsed)
        started = time.monotonic()
        await beats(keeper, "quick", 6)
        # Six of the quick turn's heartbeats, a third of a lease apart, without
        # waiting behind the slow one's (at least 6 * LEASE / 2 one after the other).
        assert time.monotonic() - started < 6 * LEASE / 2
        await beats(keeper, "slow", 3)
        assert lapsed == []
    finally:
        await asyncio.to_thread(keeper.close)
