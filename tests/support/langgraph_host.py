"""`turnkeeper agent langgraph.json` as a real subprocess: the graphs of a
langgraph.json hosted durably, for the LangGraph API tests.

`hosted(...)` is one host for the length of an `async with`; `hosts_for(...)` is
the same hosts, started one after another (kill one, start the next: a crash, a
hand-off), all closed at its end. `spawn_host` is for a test that waits for a
readiness of its own (the TypeScript runners)."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from typing_extensions import Unpack

from tests.support.agents import Agent
from tests.support.procs import spawn_python

if TYPE_CHECKING:
    from turnkeeper_server.app import TurnkeeperServer

    from tests.support.nats import NatsServer

REPO = Path(__file__).resolve().parents[2]
THREADPLANE = REPO / "examples" / "threadplane" / "langgraph.json"


async def spawn_host(
    config: Path,
    *,
    service: str,
    nats_url: str,
    replica: str,
    token: str | None = None,
    step_delay: float | None = None,
    extra_env: dict[str, str] | None = None,
) -> Agent:
    """Start the host; `await agent.wait_line(startup_done)` before using it.
    `step_delay`: seconds each node of the example graphs takes (a window mid-step)."""
    if step_delay is not None:
        extra_env = {**(extra_env or {}), "THREADPLANE_STEP_DELAY": str(step_delay)}
    env = {
        **os.environ,
        "TURNKEEPER_ADDRESS": service,
        "NATS_URL": nats_url,
        "TURNKEEPER_REPLICA": replica,
        "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }
    env.pop("TURNKEEPER_TOKEN", None)
    if token is not None:
        env["TURNKEEPER_TOKEN"] = token
    child = await spawn_python(
        "-m",
        "turnkeeper.agent.host",
        str(config),
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    return Agent(child, replica)


def startup_done(line: str) -> bool:
    """The bridge's startup Redrive is done: it serves, and took its orphans back."""
    return "startup Redrive:" in line


class HostOptions(TypedDict, total=False):
    """What `spawn_host` takes beyond where the host runs and its name."""

    token: str | None
    step_delay: float | None
    extra_env: dict[str, str] | None


async def start_host(
    config: Path = THREADPLANE,
    *,
    service: str,
    nats_url: str,
    replica: str,
    **options: Unpack[HostOptions],
) -> Agent:
    """Start the host and return once it serves (`startup_done`)."""
    agent = await spawn_host(config, service=service, nats_url=nats_url, replica=replica, **options)
    await agent.wait_line(startup_done)
    return agent


@dataclass
class LangGraphHosts:
    """Hosts of one langgraph.json against one service and NATS, started one after
    another; `close()` ends each (a killed one too)."""

    config: Path
    service: TurnkeeperServer
    nats: NatsServer
    replica: str
    options: HostOptions
    started: list[Agent] = field(default_factory=list)

    async def start(self, replica: str | None = None, **options: Unpack[HostOptions]) -> Agent:
        """One more host, serving on return; `replica` names it apart from the rest,
        `options` are taken over the hosts' own (a re-drive's host without the
        first one's step delay)."""
        merged: HostOptions = {**self.options, **options}
        agent = await start_host(
            self.config,
            service=self.service.address,
            nats_url=self.nats.url,
            replica=replica or self.replica,
            **merged,
        )
        self.started.append(agent)
        return agent

    async def close(self) -> None:
        for agent in self.started:
            await agent.close()


@contextlib.asynccontextmanager
async def hosts_for(
    config: Path,
    service: TurnkeeperServer,
    nats: NatsServer,
    *,
    replica: str,
    **options: Unpack[HostOptions],
) -> AsyncIterator[LangGraphHosts]:
    """No host yet: the test starts each (`await hosts.start()`)."""
    hosts = LangGraphHosts(config, service, nats, replica, options)
    try:
        yield hosts
    finally:
        await hosts.close()


@contextlib.asynccontextmanager
async def hosted(
    config: Path,
    service: TurnkeeperServer,
    nats: NatsServer,
    *,
    replica: str,
    **options: Unpack[HostOptions],
) -> AsyncIterator[Agent]:
    """One host, serving, for the length of the `async with`."""
    async with hosts_for(config, service, nats, replica=replica, **options) as hosts:
        yield await hosts.start()
