"""The Node runner as a newcomer meets it (issue 49): `TurnRunner.run()` ends
promptly on SIGTERM or SIGINT whatever it is waiting for (the service, NATS), and
its /healthz takes a free port when the default 8080 is taken (decision 323)."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import PATIENCE, Agent
from tests.support.node import NodeAgents, node_agents

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# What the issue asks of a process told to stop: gone within this.
STOP_WITHIN = 5.0
DEFAULT_HEALTH_PORT = 8080


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port nothing listens on (bound, never listening, so nobody else gets it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture
async def runners(node_package: Path, tmp_path: Path) -> AsyncIterator[NodeAgents]:
    """Runners with no service nor NATS of their own: each test says where they are."""
    async with node_agents(node_package, "", "", tmp_path / "side.log", "js-stops") as started:
        yield started


async def runner(
    runners: NodeAgents, *, service: str, nats_url: str, health: str = "127.0.0.1:0"
) -> Agent:
    return await runners.spawn(
        f"r{len(runners.spawned)}",
        service=service,
        nats_url=nats_url,
        # Empty: the runner's default address, as when the variable is not set.
        extra_env={"RUN_UNTIL_SIGNAL": "1", "TURNKEEPER_HEALTH_LISTEN": health},
    )


async def stops_within(agent: Agent, seconds: float, sig: signal.Signals) -> int:
    agent.signal(sig)
    try:
        return await asyncio.wait_for(agent.wait_exited(), seconds)
    except TimeoutError:
        raise AssertionError(
            f"the runner still runs {seconds} s after {sig.name}:\n{agent.output()}"
        ) from None


def healthz_url(line: str) -> bool:
    return "/healthz on http://" in line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
async def test_run_stops_while_the_service_and_nats_are_unreachable(
    runners: NodeAgents, closed_port: int, sig: signal.Signals
) -> None:
    dead = f"127.0.0.1:{closed_port}"
    agent = await runner(runners, service=dead, nats_url=f"nats://{dead}")
    await agent.wait_line(healthz_url, PATIENCE)
    assert await stops_within(agent, STOP_WITHIN, sig) == 0
    await agent.wait_exit(PATIENCE)
    assert "stopped" in agent.lines


async def test_run_stops_while_nats_is_unreachable(
    runners: NodeAgents, closed_port: int, service: TurnkeeperServer
) -> None:
    agent = await runner(
        runners, service=service.address, nats_url=f"nats://127.0.0.1:{closed_port}"
    )
    await agent.wait_line(
        lambda line: "startup Redrive waits for /healthz 200" in line and "NATS" in line,
        PATIENCE * 4,
    )
    assert await stops_within(agent, STOP_WITHIN, signal.SIGTERM) == 0


async def test_the_default_health_port_gives_way_when_taken(
    runners: NodeAgents, closed_port: int
) -> None:
    """8080 held (by this test, or already by another process): the runner started
    with defaults takes a free port and says so, naming the variable."""
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", DEFAULT_HEALTH_PORT))
        held.listen()
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        # Someone else holds it: taken all the same.
    try:
        dead = f"127.0.0.1:{closed_port}"
        agent = await runner(runners, service=dead, nats_url=f"nats://{dead}", health="")
        line = await agent.wait_line(healthz_url, PATIENCE)
        assert not line.endswith(f":{DEFAULT_HEALTH_PORT}/healthz"), line
        assert "127.0.0.1:8080 is in use (another agent?)" in agent.output()
        assert "TURNKEEPER_HEALTH_LISTEN" in agent.output()
        assert await stops_within(agent, STOP_WITHIN, signal.SIGTERM) == 0
    finally:
        held.close()


async def test_an_explicit_health_address_in_use_names_the_variable(
    runners: NodeAgents, closed_port: int
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        dead = f"127.0.0.1:{closed_port}"
        agent = await runner(
            runners, service=dead, nats_url=f"nats://{dead}", health=f"127.0.0.1:{port}"
        )
        assert await agent.wait_exit(PATIENCE) != 0
    assert f"/healthz cannot listen on 127.0.0.1:{port}: the port is in use" in agent.output()
    assert "set TURNKEEPER_HEALTH_LISTEN" in agent.output()
