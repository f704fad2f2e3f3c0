"""Fixtures for the lifecycle tests: real agent subprocesses, a typed client, and a
NATS subscriber on every turn subject."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agents, agents_for
from tests.support.nats import Collector, NatsServer, subscribe


@pytest.fixture
async def agents(
    service: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agents]:
    async with agents_for(service.address, nats_server.url, tmp_path / "side.log") as spawned:
        yield spawned


@pytest.fixture
async def client(service: TurnkeeperServer) -> AsyncIterator[AsyncTurnkeeperClient]:
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service.address)) as c:
        yield c


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[tuple[Client, Collector]]:
    nc, collector = await subscribe(nats_server.url, "vystak.turn.>")
    yield nc, collector
    await nc.close()
