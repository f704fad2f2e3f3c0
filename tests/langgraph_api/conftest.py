"""A service with its HTTP port (the LangGraph API), and the threadplane graph
hosted by `turnkeeper agent` against it; clients are LangGraph's own SDK.

A module of secured tests overrides `roles` (name -> role): the service then takes
a token for each (`tokens`, by name), and `sdks` is an SDK client per token.

A test marked `shared_deployment` (tests/support/fixtures.py) gets `api_url`, `sdk`
and `client` of the worker's shared deployment of these graphs on its backend
(tests/support/deployment.py) instead of a fresh one, and `deployments` for graphs
of its own: it may not ask for the `service` or the `host`, and works on threads,
runs and assistants of its own (decision 740)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent
from tests.support.deployment import SharedDeployment, SharedDeployments
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


def _pool(data_dir: Path, database_url: Callable[[], str | None]) -> Iterator[SharedDeployments]:
    pool = SharedDeployments(data_dir, database_url)
    try:
        yield pool
    finally:
        pool.stop()


@pytest.fixture(scope="session")
def shared_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedDeployments]:
    """The worker's shared deployments on SQLite, each started by its first test."""
    yield from _pool(tmp_path_factory.mktemp("shared-sqlite"), lambda: None)


@pytest.fixture(scope="session")
def shared_postgres(
    postgres_cluster: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SharedDeployments]:
    """The worker's shared deployments, each on a database of its own of the worker's
    PostgreSQL (which they depend on, so the cluster outlives them)."""
    yield from _pool(tmp_path_factory.mktemp("shared-postgres"), postgres_cluster.new_database)


@pytest.fixture
def deployments(request: pytest.FixtureRequest, backend: str) -> SharedDeployments:
    """The worker's shared deployments on the test's backend (for a module whose
    graphs are not GRAPHS: `deployments.get(its_config, replica=...)`)."""
    if not _shared(request):
        raise pytest.UsageError(
            f"{request.node.nodeid}: `deployments` is for a `{SHARED_DEPLOYMENT_MARK}` test"
        )
    pool: SharedDeployments = request.getfixturevalue(f"shared_{backend}")
    return pool


def _shared_graphs(request: pytest.FixtureRequest) -> SharedDeployment:
    pool: SharedDeployments = request.getfixturevalue("deployments")
    return pool.get(GRAPHS, replica=REPLICA, step_delay=STEP_DELAY)


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
    """The LangGraph API of the test's service, or of the shared deployment
    (`backend` named, so a `both_backends` test is parametrized by it either way)."""
    if _shared(request):
        return _shared_graphs(request).url
    service: TurnkeeperServer = request.getfixturevalue("service")
    assert service.web is not None
    return service.web.url.rstrip("/")


@pytest.fixture
def grpc_address(request: pytest.FixtureRequest, backend: str) -> str:
    """The gRPC address of the test's service, or of the shared deployment
    (`backend` named, as for `api_url`)."""
    if _shared(request):
        return _shared_graphs(request).address
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
