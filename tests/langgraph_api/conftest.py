"""A service with its HTTP port (the LangGraph API), and the threadplane graph
hosted by `turnkeeper agent` against it; clients are LangGraph's own SDK.

A module of secured tests overrides `roles` (name -> role): the service then takes
a token for each (`tokens`, by name), and `sdks` is an SDK client per token.

A test marked `shared_deployment` (tests/support/fixtures.py) gets `api_url` and `sdk`
of the worker's shared deployment of these graphs on its backend
(tests/support/deployment.py) instead of a fresh one: it may not ask for the
`service` or the `host`, and works on threads, runs and assistants of its own."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent
from tests.support.deployment import SharedDeployment
from tests.support.langgraph_host import hosted
from tests.support.nats import NatsServer
from tests.support.postgres import PostgresCluster
from tests.support.security import write_tokens
from tests.support.service import SHARED_DEPLOYMENT_MARK, ServiceFactory

# The threadplane example and a graph that interrupts, hosted by one process.
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"
# The host's options, the fresh `host`'s and the shared deployment's alike.
REPLICA = "lg-1"
STEP_DELAY = 0.05


def _shared(request: pytest.FixtureRequest) -> bool:
    return request.node.get_closest_marker(SHARED_DEPLOYMENT_MARK) is not None


def _not_shared(request: pytest.FixtureRequest, fixture: str) -> None:
    if _shared(request):
        raise pytest.UsageError(
            f"{request.node.nodeid}: a `{SHARED_DEPLOYMENT_MARK}` test cannot have the "
            f"`{fixture}` (the deployment is the worker's, on a loop of its own)"
        )


def _shared_deployment(data_dir: Path, database_url: str | None) -> Iterator[SharedDeployment]:
    deployment = SharedDeployment(
        GRAPHS, data_dir, database_url=database_url, replica=REPLICA, step_delay=STEP_DELAY
    )
    deployment.start()
    try:
        yield deployment
    finally:
        deployment.stop()


@pytest.fixture(scope="session")
def shared_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDeployment]:
    """The worker's shared deployment on SQLite, started by its first test."""
    yield from _shared_deployment(tmp_path_factory.mktemp("shared-sqlite"), None)


@pytest.fixture(scope="session")
def shared_postgres(
    postgres_cluster: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharedDeployment]:
    """The worker's shared deployment on a database of its PostgreSQL (which it
    depends on, so the cluster outlives it)."""
    yield from _shared_deployment(
        tmp_path_factory.mktemp("shared-postgres"), postgres_cluster.new_database()
    )


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
def api_url(request: pytest.FixtureRequest, backend: str) -> str:
    """The LangGraph API of the test's service, or of the shared deployment."""
    if _shared(request):
        deployment: SharedDeployment = request.getfixturevalue(f"shared_{backend}")
        return deployment.url
    service: TurnkeeperServer = request.getfixturevalue("service")
    assert service.web is not None
    return service.web.url.rstrip("/")


@pytest.fixture
def grpc_address(request: pytest.FixtureRequest, backend: str) -> str:
    """The gRPC address of the test's service, or of the shared deployment."""
    if _shared(request):
        deployment: SharedDeployment = request.getfixturevalue(f"shared_{backend}")
        return deployment.address
    service: TurnkeeperServer = request.getfixturevalue("service")
    return service.address


@pytest.fixture
async def client(grpc_address: str) -> AsyncIterator[AsyncTurnkeeperClient]:
    """A typed client of the test's service (or of the shared deployment's)."""
    async with AsyncTurnkeeperClient(ConnectionOptions(target=grpc_address)) as c:
        yield c


@pytest.fixture
async def host(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Agent]:
    _not_shared(request, "host")
    async with hosted(
        GRAPHS, service, nats_server, replica=REPLICA, step_delay=STEP_DELAY
    ) as agent:
        yield agent


@pytest.fixture
def served(api_url: str, request: pytest.FixtureRequest) -> str:
    """`api_url` once the graphs are hosted against it: the test's `host` started,
    or the shared deployment's (up since it started)."""
    if not _shared(request):
        request.getfixturevalue("host")
    return api_url


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
async def sdk(served: str) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=served)
    try:
        yield client
    finally:
        await client.http.client.aclose()
