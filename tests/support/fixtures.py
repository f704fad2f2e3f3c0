"""Fixtures that many test modules used to define for themselves, defined once here
and registered for the whole suite by tests/conftest.py (`pytest_plugins`).

A module that needs something different keeps its own fixture of the same name,
which pytest prefers to these: e.g. a `client` on another service, a `nc` on a
JetStream server, or `agents` against a secured service.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agents, agents_for
from tests.support.nats import Collector, NatsServer, subscribe
from tests.support.node import prepare_package
from tests.support.service import SHARED_DEPLOYMENT_MARK, UNRENEWED_MARK


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{UNRENEWED_MARK}: the test writes its turns itself and no agent renews their "
        "lease: its services take tests/support/service.py's unrenewed() lease",
    )
    config.addinivalue_line(
        "markers",
        f"{SHARED_DEPLOYMENT_MARK}: the LangGraph API test's api_url and sdk are the "
        "worker's shared deployment on its backend (tests/support/deployment.py)",
    )


@pytest.fixture
async def client(service: TurnkeeperServer) -> AsyncIterator[AsyncTurnkeeperClient]:
    """A typed client of the test's service."""
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service.address)) as c:
        yield c


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    """A plain NATS connection to the test's nats-server."""
    conn = await nats.connect(nats_server.url)
    yield conn
    await conn.close()


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[tuple[Client, Collector]]:
    """A NATS connection subscribed to every turn subject, and what it has seen."""
    conn, collector = await subscribe(nats_server.url, "vystak.turn.>")
    yield conn, collector
    await conn.close()


@pytest.fixture
async def agents(
    service: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agents]:
    """Real agent subprocesses against the test's service."""
    async with agents_for(service.address, nats_server.url, tmp_path / "side.log") as spawned:
        yield spawned


@pytest.fixture(scope="session")
def built_node_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """clients/node copied, installed by `npm ci` and built (tests/support/node.py),
    once per session (per xdist worker) for every Node module on it. The tests of a
    worker run one at a time; one that edits the copy puts it back."""
    return prepare_package(tmp_path_factory.mktemp("node-package"))
