"""A service with its HTTP port (the LangGraph API), and the threadplane graph
hosted by `turnkeeper agent` against it; clients are LangGraph's own SDK.

A module of secured tests overrides `roles` (name -> role): the service then takes
a token for each (`tokens`, by name), and `sdks` is an SDK client per token."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent
from tests.support.langgraph_host import hosted
from tests.support.nats import NatsServer
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

# The threadplane example and a graph that interrupts, hosted by one process.
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"


@pytest.fixture
def roles() -> dict[str, str]:
    """Who holds a token (name -> role): nobody, so the service takes no tokens."""
    return {}


@pytest.fixture
def tokens(roles: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """A token for each of `roles` (name -> token), in tmp_path/tokens.jsonl."""
    return write_tokens(tmp_path / "tokens.jsonl", roles) if roles else {}


@pytest.fixture
async def service(
    make_service: ServiceFactory,
    nats_server: NatsServer,
    tmp_path: Path,
    roles: dict[str, str],
    request: pytest.FixtureRequest,
) -> TurnkeeperServer:
    """The test's service, with its HTTP port (the `client` fixture's too); with
    `roles`, it takes their tokens and no others (a module's own `tokens`, for a
    service it makes itself, leaves this one open)."""
    secured = {}
    if roles:
        request.getfixturevalue("tokens")
        secured["tokens_file"] = tmp_path / "tokens.jsonl"
    return await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0", **secured)


@pytest.fixture
def api_url(service: TurnkeeperServer) -> str:
    assert service.web is not None
    return service.web.url.rstrip("/")


@pytest.fixture
async def host(
    service: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agent]:
    async with hosted(GRAPHS, service, nats_server, replica="lg-1", step_delay=0.05) as agent:
        yield agent


@pytest.fixture
async def sdks(api_url: str, tokens: dict[str, str]) -> AsyncIterator[dict[str, LangGraphClient]]:
    """An SDK client per token of `roles`, by name."""
    clients = {name: get_client(url=api_url, api_key=token) for name, token in tokens.items()}
    try:
        yield clients
    finally:
        for client in clients.values():
            await client.http.client.aclose()


@pytest.fixture
async def sdk(api_url: str, host: Agent) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=api_url)
    try:
        yield client
    finally:
        await client.http.client.aclose()
