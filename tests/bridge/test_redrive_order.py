"""The startup order of an agent: its own /healthz answers 200 first, then it
re-drives its orphans; /healthz never waits for the re-drive.

A real agent process (tests/agents/job_agent.py) starts as the replica that owned
an orphaned turn, against a real service and a real nats-server. The service's
startup re-drive is observed where it arrives: when the agent's Redrive reaches
the service, the test asks the agent's /healthz, and holds the Redrive while it
asks again. Both ways: NATS up at startup, and NATS down at startup (the re-drive
then waits for NATS, decision 38).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from turnkeeper.agent.bridge._health import get
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.journal.redrive import Redriven

from tests.support.agents import AGENT, Agent, Agents, Panel
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory, unrenewed
from tests.support.turns import value

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

REPLICA = "r-order"
JOB = {"job": "report", "results": []}


class RedriveWatch:
    """Wraps the service's startup re-drive: on arrival it records the agent's
    /healthz status, then holds the re-drive until released."""

    def __init__(self, service: TurnkeeperServer) -> None:
        self.arrivals: list[tuple[int, str]] = []
        self.arrived = asyncio.Event()
        self.release = asyncio.Event()
        self.agent: Agent | None = None
        self._original: Callable[..., Awaitable[list[Redriven]]] = (
            service.engine.turns.redrive_replica
        )

    async def redrive_replica(self, **kwargs: Any) -> list[Redriven]:
        if kwargs.get("replica") == REPLICA:
            assert self.agent is not None
            self.arrivals.append(await agent_healthz(self.agent))
            self.arrived.set()
            await self.release.wait()
        return await self._original(**kwargs)


async def agent_healthz(agent: Agent) -> tuple[int, str]:
    line = await agent.wait_line(lambda line: "/healthz on http://" in line)
    match = re.search(r"http://([\d.]+):(\d+)/healthz", line)
    assert match is not None, line
    return await get(match.group(1), int(match.group(2)))


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    # Leases longer than any test: the orphan is re-driven by the agent's startup,
    # never by the reaper's lease expiry.
    return await make_service(nats_url=nats_server.url, **unrenewed(claims=True))


@pytest.fixture
async def watch(service: TurnkeeperServer, monkeypatch: pytest.MonkeyPatch) -> RedriveWatch:
    w = RedriveWatch(service)
    monkeypatch.setattr(service.engine.turns, "redrive_replica", w.redrive_replica)
    return w


async def orphan(
    client: AsyncTurnkeeperClient, turn_id: str, *, agent: str = AGENT, job: Any = JOB
) -> None:
    """A turn journaled by an incarnation of the replica that is gone."""
    await client.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=f"th-{turn_id}",
            agent=agent,
            input=value(job),
            replica=REPLICA,
            incarnation="gone",
        )
    )


async def finishes(client: AsyncTurnkeeperClient, turn_id: str) -> list[str]:
    panel = Panel()
    panel.start(client, turn_id)
    types = [t for _, t, _ in await panel.ended()]
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
    assert (status.state, status.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
    return types


async def test_with_nats_up_healthz_is_200_before_the_redrive_and_while_it_runs(
    watch: RedriveWatch, agents: Agents, client: AsyncTurnkeeperClient
) -> None:
    await orphan(client, "t-up")
    watch.agent = await agents.spawn(REPLICA)
    await asyncio.wait_for(watch.arrived.wait(), 60)
    assert watch.arrivals == [(200, "ok\n")]
    # The re-drive is held at the service: /healthz does not wait for it.
    assert await agent_healthz(watch.agent) == (200, "ok\n")
    watch.release.set()
    assert (await finishes(client, "t-up"))[-1] == "turn.done"
    assert len(watch.arrivals) == 1


async def test_with_nats_down_the_redrive_waits_for_healthz_200(
    watch: RedriveWatch, agents: Agents, client: AsyncTurnkeeperClient, nats_server: NatsServer
) -> None:
    await orphan(client, "t-down")
    nats_server.stop()
    watch.agent = agent = await agents.spawn(REPLICA)
    # Up, answering 503 (NATS), and not re-driving.
    waiting = await agent.wait_line(lambda line: "startup Redrive waits for /healthz 200" in line)
    assert "NATS" in waiting
    code, reason = await agent_healthz(agent)
    assert code == 503 and "NATS" in reason
    assert watch.arrivals == []
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-down"))
    assert (status.state, status.attempts) == (turns_pb2.TURN_STATE_RUNNING, 0)

    nats_server.start()
    await asyncio.wait_for(watch.arrived.wait(), 60)
    assert watch.arrivals == [(200, "ok\n")]
    watch.release.set()
    assert (await finishes(client, "t-down"))[-1] == "turn.done"
    # Re-driven once, by the startup re-drive: every event is the second attempt's.
    events = (await client.list_events(turns_pb2.ListEventsRequest(turn_id="t-down"))).events
    assert {e.attempt for e in events} == {1}
