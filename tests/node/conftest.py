"""What every test of the Node.js package starts from: the package, installed and
built once per worker, and its test agent's replicas against the test's service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.node import NodeAgents, node_agents


@pytest.fixture
def node_package(built_node_package: Path) -> Path:
    """clients/node, installed and built once per worker (tests/support/fixtures.py)."""
    return built_node_package


@pytest.fixture
async def js_agents(
    request: pytest.FixtureRequest,
    node_package: Path,
    service: TurnkeeperServer,
    nats_server: NatsServer,
    tmp_path: Path,
) -> AsyncIterator[NodeAgents]:
    """Replicas of clients/node/testing/agent.mjs against the test's service and
    nats-server, of the agent the module names in AGENT (if it names one), their side
    effects in tmp_path/side.log; each closed at the end of the test."""
    agent = getattr(request.module, "AGENT", None)
    async with node_agents(
        node_package, service.address, nats_server.url, tmp_path / "side.log", agent
    ) as agents:
        yield agents
