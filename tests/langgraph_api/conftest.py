"""A service with its HTTP port (the LangGraph API), and the threadplane graph
hosted by `turnkeeper agent` against it; clients are LangGraph's own SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent
from tests.support.langgraph_host import start_host
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

# The threadplane example and a graph that interrupts, hosted by one process.
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    """The test's service, with its HTTP port (the `client` fixture's too)."""
    return await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")


@pytest.fixture
def api_url(service: TurnkeeperServer) -> str:
    assert service.web is not None
    return service.web.url.rstrip("/")


@pytest.fixture
async def host(
    service: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agent]:
    agent = await start_host(
        GRAPHS,
        service=service.address,
        nats_url=nats_server.url,
        replica="lg-1",
        step_delay=0.05,
    )
    try:
        yield agent
    finally:
        await agent.close()


@pytest.fixture
async def sdk(api_url: str, host: Agent) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=api_url)
    try:
        yield client
    finally:
        await client.http.client.aclose()
