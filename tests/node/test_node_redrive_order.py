"""The Node runner's startup order is the Python bridge's: its own /healthz answers
200 first, then it re-drives its orphans; no fixed timer starts a re-drive while
/healthz is still 503, and /healthz never waits for the re-drive.

A real Node agent process (clients/node/testing/agent.mjs under TurnRunner) starts as
the replica that owned an orphaned turn, against a real service and a real
nats-server. The service's startup re-drive is observed where it arrives: when the
runner's Redrive reaches the service, the test asks the runner's /healthz, and holds
the Redrive while it asks again. Both ways, as tests/bridge/test_redrive_order.py
does for Python: NATS up at startup, and NATS down at startup (the re-drive then
waits for NATS, however long that takes).
"""

from __future__ import annotations

import asyncio

import pytest
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.bridge.test_redrive_order import REPLICA, RedriveWatch, agent_healthz, finishes, orphan
from tests.support.nats import NatsServer
from tests.support.node import NodeAgents
from tests.support.service import ServiceFactory, unrenewed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGENT = "js-order"
WAITS = "startup Redrive waits for /healthz 200"


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    # Leases longer than any test: the orphan is re-driven by the runner's startup,
    # never by the reaper's lease expiry.
    return await make_service(nats_url=nats_server.url, **unrenewed(claims=True))


@pytest.fixture
async def watch(service: TurnkeeperServer, monkeypatch: pytest.MonkeyPatch) -> RedriveWatch:
    w = RedriveWatch(service)
    monkeypatch.setattr(service.engine.turns, "redrive_replica", w.redrive_replica)
    return w


async def test_with_nats_up_healthz_is_200_before_the_redrive_and_while_it_runs(
    js_agents: NodeAgents, watch: RedriveWatch, client: AsyncTurnkeeperClient
) -> None:
    await orphan(client, "t-up", agent=AGENT, job="report")
    watch.agent = agent = await js_agents.spawn(REPLICA)
    await asyncio.wait_for(watch.arrived.wait(), 60)
    assert watch.arrivals == [(200, "ok\n")]
    # The re-drive is held at the service: /healthz does not wait for it.
    assert await agent_healthz(agent) == (200, "ok\n")
    watch.release.set()
    assert (await finishes(client, "t-up"))[-1] == "turn.done"
    assert len(watch.arrivals) == 1


async def test_with_nats_down_the_redrive_waits_for_healthz_200(
    js_agents: NodeAgents,
    nats_server: NatsServer,
    watch: RedriveWatch,
    client: AsyncTurnkeeperClient,
) -> None:
    await orphan(client, "t-down", agent=AGENT, job="report")
    nats_server.stop()
    watch.agent = agent = await js_agents.spawn(REPLICA)
    # Up, answering 503 (NATS), and not re-driving, however long NATS stays away:
    # the runner says so twice, the second time well past any startup timer.
    waiting = await agent.wait_line(lambda line: WAITS in line)
    assert "NATS" in waiting
    code, reason = await agent_healthz(agent)
    assert code == 503 and "NATS" in reason
    reports = sum(WAITS in line for line in agent.lines)
    await agent.wait_line(
        lambda _: sum(WAITS in line for line in agent.lines) > reports, timeout=30
    )
    assert watch.arrivals == []
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-down"))
    assert (status.state, status.attempts) == (turns_pb2.TURN_STATE_RUNNING, 0)

    nats_server.start()
    await asyncio.wait_for(watch.arrived.wait(), 60)
    assert watch.arrivals == [(200, "ok\n")]
    watch.release.set()
    assert (await finishes(client, "t-down"))[-1] == "turn.done"
    events = (await client.list_events(turns_pb2.ListEventsRequest(turn_id="t-down"))).events
    assert {e.attempt for e in events} == {1}
