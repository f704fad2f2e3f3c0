"""A turn is orphaned only when its agent is gone (issue 51): when a lease lapses, the
service asks the owner's incarnation over NATS whether it still runs the turn. A
replica that answers keeps its turn, with a fresh lease; one that does not (dead,
frozen, or no longer running it) loses it to a re-drive, as before."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper.agent.bridge import Bridge
from turnkeeper.agent.bridge._jsonrpc import Request
from turnkeeper.agent.bridge._lease import LeaseKeeper
from turnkeeper.agent.bridge._methods import ALIVE
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.bridge.test_bridge_admission import Gates, create
from tests.support.agents import Panel
from tests.support.bridges import bridge_config
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.timeout(120)]

AGENT = "gated"


@pytest.fixture
async def quick_lease(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, lease_seconds=0.5, reap_interval=0.1)


class Renewals(logging.Handler):
    """Counts the service's "lease renewed" lines (logged from its writer thread)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop = loop
        self.count = 0
        self.changed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "answers that it still runs it" in record.getMessage():
            self.loop.call_soon_threadsafe(self._one)

    def _one(self) -> None:
        self.count += 1
        self.changed.set()

    async def reached(self, n: int) -> None:
        async with asyncio.timeout(30):
            while self.count < n:
                self.changed.clear()
                await self.changed.wait()


async def test_a_lapsed_lease_whose_agent_still_runs_the_turn_is_renewed_not_redriven(
    quick_lease: TurnkeeperServer,
    nats_server: NatsServer,
    nc: Client,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Heartbeats that never get through (a starved machine, at its worst): the lease
    # lapses again and again while the agent runs the turn.
    def starved(self: LeaseKeeper, *args: Any, **kwargs: Any) -> None:
        return None

    monkeypatch.setattr(LeaseKeeper, "hold", starved)
    renewals = Renewals(asyncio.get_running_loop())
    logging.getLogger("turnkeeper_server.engine").addHandler(renewals)
    gates = Gates()
    client = AsyncTurnkeeperClient(ConnectionOptions(target=quick_lease.address))
    try:
        async with Bridge(
            gates.graph(), bridge_config(AGENT, quick_lease.address, nats_server.url, "gated-1")
        ) as bridge:
            await bridge.wait_subscribed()
            await create(nc, "slow")
            await asyncio.wait_for(gates.of("slow")[0].wait(), 30)
            # Several leases pass without a heartbeat; each lapse is asked about.
            await renewals.reached(3)
            gates.of("slow")[1].set()
            panel = Panel()
            panel.start(client, "slow")
            await panel.ended(timeout=30)
        done = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="slow"))
        assert (done.state, done.attempts) == (turns_pb2.TURN_STATE_DONE, 0), done
    finally:
        logging.getLogger("turnkeeper_server.engine").removeHandler(renewals)
        await client.close()


async def test_only_the_owning_incarnation_answers_and_only_for_turns_it_runs(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    nc: Client,
) -> None:
    gates = Gates()
    config = bridge_config(AGENT, service.address, nats_server.url, "gated-1")
    async with Bridge(gates.graph(), config) as bridge:
        await bridge.wait_subscribed()
        await create(nc, "mine")
        await asyncio.wait_for(gates.of("mine")[0].wait(), 30)
        ask = bridge.methods.dispatch

        def question(incarnation: str, turns: dict[str, int]) -> Request:
            params = {"incarnation": incarnation, "turns": turns}
            return Request(id="1", method=ALIVE, params=params, metadata={})

        mine = await ask(question(config.incarnation, {"mine": 0, "other": 0}))
        assert mine.result == {"running": ["mine"]}
        # Another attempt of it is not what this replica runs.
        assert (await ask(question(config.incarnation, {"mine": 1}))).result == {"running": []}
        # Another incarnation's question: no answer at all (its owner may still answer).
        assert (await ask(question("someone-else", {"mine": 0}))).silent
        gates.of("mine")[1].set()
