"""A node that holds the agent's event loop for longer than the lease does not get
its turn declared dead (decision 320): the bridge renews leases from a thread of
its own, so the service (another process) sees heartbeats while the loop is busy,
and the turn finishes on its first attempt, neither re-driven nor failed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from nats.aio.client import Client
from turnkeeper.agent.bridge import Bridge
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2

from tests.support.agents import Panel, result
from tests.support.bridges import bridge_config
from tests.support.nats import NatsServer, subscribe
from tests.support.procs import ServiceProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

AGENT = "busy"
# The service's lease, and how long the node holds the loop: several leases.
LEASE = 1.0
HOLD = 4 * LEASE


class State(TypedDict):
    text: str


def build() -> StateGraph[Any, Any, Any, Any]:
    async def hog(state: State) -> dict[str, Any]:
        # CPU-bound work inside an async node: nothing else on this loop runs.
        end = time.monotonic() + HOLD
        while time.monotonic() < end:
            pass
        return {"text": state["text"] + " done"}

    builder = StateGraph(State)
    builder.add_node("hog", hog)
    builder.add_edge(START, "hog")
    builder.add_edge("hog", END)
    return builder


@pytest.fixture
async def service(
    tmp_path: Path, nats_server: NatsServer, database_url: str | None
) -> AsyncIterator[str]:
    proc = ServiceProcess(
        tmp_path,
        nats_url=nats_server.url,
        database_url=database_url,
        extra=["--lease-seconds", str(LEASE)],
    )
    address = await asyncio.to_thread(proc.start)
    yield address
    proc.kill()


@pytest.mark.both_backends
async def test_a_node_holding_the_loop_past_the_lease_keeps_its_turn(
    service: str, nats_server: NatsServer
) -> None:
    config = bridge_config(AGENT, service, nats_server.url, "busy-1")
    nc: Client
    nc, _ = await subscribe(nats_server.url, "vystak.turn.>")
    client = AsyncTurnkeeperClient(ConnectionOptions(target=service))
    try:
        async with Bridge(build(), config) as bridge:
            await bridge.wait_subscribed()
            created = await result(
                nc,
                "responses/create",
                {"input": {"text": "go"}, "background": True},
                agent=AGENT,
            )
            panel = Panel()
            panel.start(client, created["turn_id"])
            await panel.ended(timeout=90)
            status = await client.turn_status(
                turns_pb2.TurnStatusRequest(turn_id=created["turn_id"])
            )
        # Done by its first attempt: no re-drive, no failure.
        assert status.state == turns_pb2.TURN_STATE_DONE, status
        assert status.attempts == 0, status
    finally:
        await client.close()
        await nc.close()
