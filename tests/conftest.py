"""Shared fixtures: a real nats-server, a real grpc.aio service on port 0, SQLite
files under tmp_path or a database of a real PostgreSQL. Nothing is mocked.

The service-level suites run on both backends: a module marked `both_backends`
gets each test twice, with `backend` "sqlite" and "postgres"; a test marked
`postgres_only` gets "postgres" alone (what only replicas can race on); every
other test gets "sqlite". The services a test starts follow `backend`.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer, create_server

from tests.support.nats import NatsServer
from tests.support.postgres import PostgresCluster
from tests.support.service import BACKENDS, ServiceFactory, lease_for, make_settings

# Fixtures more than one package's tests use (client, nc, bus, agents), defined once.
pytest_plugins = ("tests.support.fixtures",)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (the addopts): three workers for two cores. A test here spends much
    of its time waiting on what it started (a service, an agent, a browser, a
    database coming up or shutting down), so two workers leave a core idle for long
    stretches; a worker and a half per core keeps both busy (decision 329)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = cores or 1
    return cores + (cores + 1) // 2


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--full",
        action="store_true",
        help="also run the tests marked `full`: the slow campaigns at their full size",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --full, the tests marked `full` are deselected (not skipped): the
    default run keeps a reduced campaign of each kind, `pytest --full` runs them all.

    The modules with a test marked `slow` (seconds each: subprocesses, installs,
    campaigns) run first, then the others, each part in collection order (decision
    327): xdist hands tests out in this order, one at a time to the worker that is
    free, so the run ends on sub-second tests and no worker waits long for the other.
    A module's tests stay together, so a module-scoped fixture is not set up twice."""
    if not config.getoption("--full"):
        full = [item for item in items if item.get_closest_marker("full")]
        if full:
            config.hook.pytest_deselected(items=full)
            items[:] = [item for item in items if not item.get_closest_marker("full")]
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "backend" not in metafunc.fixturenames:
        return
    if metafunc.definition.get_closest_marker("postgres_only"):
        metafunc.parametrize("backend", ("postgres",))
    elif metafunc.definition.get_closest_marker("both_backends"):
        metafunc.parametrize("backend", BACKENDS)


@pytest.fixture
def backend() -> str:
    """The store the test's services use; "sqlite" unless the module runs on both."""
    return "sqlite"


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One PostgreSQL per session, so one per xdist worker: its own directory and
    Unix socket (tests/support/postgres.py)."""
    with PostgresCluster.temporary() as cluster:
        yield cluster


@pytest.fixture
def database_url(backend: str, request: pytest.FixtureRequest) -> str | None:
    """A fresh PostgreSQL database for a postgres-backend test; None for SQLite."""
    if backend != "postgres":
        return None
    cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
    return cluster.new_database()


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    server = NatsServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def make_service(
    tmp_path: Path,
    nats_server: NatsServer,
    database_url: str | None,
    request: pytest.FixtureRequest,
) -> AsyncIterator[ServiceFactory]:
    # Depends on nats_server so NATS outlives every service: teardown stops the
    # services first, and their outbox flush finds NATS still there.
    started: list[TurnkeeperServer] = []
    # A test marked `unrenewed` writes its turns itself: a lease no load outlasts.
    lease = lease_for(request)

    async def make(**overrides: Any) -> TurnkeeperServer:
        overrides = {**lease, **overrides}
        overrides.setdefault("database_url", database_url)
        server = await create_server(make_settings(tmp_path, **overrides))
        started.append(server)
        return server

    yield make
    for server in started:
        await server.stop(0)


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url)


@pytest.fixture
async def channel(service: TurnkeeperServer) -> AsyncIterator[aio.Channel]:
    async with aio.insecure_channel(service.address) as ch:
        yield ch


@pytest.fixture
def turns(channel: aio.Channel) -> turns_pb2_grpc.TurnServiceAsyncStub:
    return turns_pb2_grpc.TurnServiceStub(channel)


@pytest.fixture
def checkpoints(channel: aio.Channel) -> checkpoints_pb2_grpc.CheckpointServiceAsyncStub:
    return checkpoints_pb2_grpc.CheckpointServiceStub(channel)
