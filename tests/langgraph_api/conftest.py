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


@pytest.fixture
async def api_service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")


@pytest.fixture
def api_url(api_service: TurnkeeperServer) -> str:
    assert api_service.web is not None
    return api_service.web.url.rstrip("/")


@pytest.fixture
async def host(
    api_service: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agent]:
    agent = await start_host(
        service=api_service.address,
        nats_url=nats_server.url,
        replica="lg-1",
        extra_env={"THREADPLANE_STEP_DELAY": "0.05"},
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
