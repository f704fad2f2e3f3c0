"""The bridge is ready (GET /healthz 200) only while NATS routes the agent's subject to
its subscription, proved by a probe that came back through it, not by flush(): 503
while NATS is away, 200 again after a reconnect, and once 200 a request from another
connection is answered at once. A real nats-server, stopped and started on its port,
and a real service; the bridge in-process."""

from __future__ import annotations

import asyncio
import contextlib
import operator
from typing import Annotated, Any, TypedDict

import nats
import pytest
from langgraph.graph import END, START, StateGraph
from turnkeeper.agent.bridge import Bridge
from turnkeeper.agent.bridge._health import get
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Panel, result
from tests.support.bridges import bridge_config
from tests.support.nats import NatsServer

pytestmark = pytest.mark.timeout(60)

AGENT = "ready"


class State(TypedDict):
    results: Annotated[list[str], operator.add]


def build() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(State)
    builder.add_node("only", lambda state: {"results": ["done"]})
    builder.add_edge(START, "only")
    builder.add_edge("only", END)
    return builder


async def healthz(bridge: Bridge) -> tuple[int, str]:
    return await get("127.0.0.1", bridge.health.port)


async def until_healthz(bridge: Bridge, status: int, timeout: float = 20) -> str:
    """Poll /healthz until it answers `status`; the body."""

    async def poll() -> str:
        while True:
            # Refused until start() has bound the port.
            with contextlib.suppress(OSError):
                code, body = await healthz(bridge)
                if code == status:
                    return body
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), timeout)


async def test_healthz_is_200_only_while_the_subscription_is_live(
    service: TurnkeeperServer, nats_server: NatsServer, client: AsyncTurnkeeperClient
) -> None:
    config = bridge_config(AGENT, service.address, nats_server.url, "r-ready")
    nats_server.stop()
    bridge = Bridge(build(), config)
    starting = asyncio.create_task(bridge.start())
    try:
        # The service answers, but with no subscription the bridge is not ready,
        # and start() (its startup Redrive) waits for /healthz 200.
        reason = await until_healthz(bridge, 503)
        assert "NATS" in reason and config.subject in reason
        assert not starting.done()

        for _ in range(2):  # first connect, then a reconnect after a NATS restart
            nats_server.start()
            await until_healthz(bridge, 200)
            await asyncio.wait_for(starting, 20)
            # Ready means routed: the first request from elsewhere is answered.
            nc = await nats.connect(nats_server.url)
            try:
                assert await result(nc, "turnkeeper/ping", {}, agent=AGENT, timeout=5) == {}
                created = await result(
                    nc,
                    "responses/create",
                    {"input": {"results": []}, "background": True},
                    agent=AGENT,
                    timeout=5,
                )
                panel = Panel()
                panel.start(client, created["turn_id"])
                assert [t for _, t, _ in await panel.ended()] == ["step", "final", "turn.done"]
            finally:
                await nc.close()
            nats_server.stop()
            reason = await until_healthz(bridge, 503)
            assert "NATS" in reason
    finally:
        await bridge.shutdown()
        await asyncio.wait_for(starting, 10)
