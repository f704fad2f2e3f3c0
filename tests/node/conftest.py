"""What the Node tests share: a Python client of the test's service (the follower
and the checks read through it)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper_server.app import TurnkeeperServer


@pytest.fixture
async def client(service: TurnkeeperServer) -> AsyncIterator[AsyncTurnkeeperClient]:
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service.address)) as c:
        yield c
