"""The agent directory (messaging/directory.py) tells a waiter of every announcement
it keeps, once it shows it: a replica that serves no LangGraph API (the TypeScript
runner's default), its slots all taken, and its farewell, each wake
tests/support/service.py's `announced` (its `on_listed` hook fires for assistants
alone, so a wait on it for such a replica never ended)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
from nats.aio.client import Client
from turnkeeper_server.app import TurnkeeperServer

from tests.support.service import announced

pytestmark = [pytest.mark.timeout(60)]

AGENT = "js-quiet"
SUBJECT = f"vystak.default.agents.{AGENT}.announce"
BUSY = {"replica": "r-1", "incarnation": "i1", "assistant": False, "max_turns": 1, "full": True}


async def test_a_non_assistant_replica_and_its_farewell_each_wake_a_waiter(
    service: TurnkeeperServer, nc: Client
) -> None:
    directory = service.engine.directory
    listed: list[str] = []
    directory.on_listed.append(listed.append)
    heard = asyncio.Event()

    def wake(agent: str) -> None:
        heard.set()

    directory.on_heard.append(wake)
    try:
        # Published until heard: one published before the service subscribed is lost.
        while not heard.is_set():
            await nc.publish(SUBJECT, json.dumps(BUSY).encode())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(heard.wait(), 0.2)
    finally:
        directory.on_listed.remove(listed.append)
        directory.on_heard.remove(wake)
    # Kept and shown by the time the hook ran; never listed as an assistant.
    assert [r.replica for r in directory.full(AGENT)] == ["r-1"]
    assert listed == [] and AGENT not in directory.agents()

    free = {**BUSY, "full": False}
    waiting = asyncio.create_task(announced(service, lambda: not directory.full(AGENT)))
    await nc.publish(SUBJECT, json.dumps(free).encode())
    await waiting
    assert [r.replica for r in directory.replicas(AGENT)] == ["r-1"]

    farewell = {"replica": "r-1", "incarnation": "i1", "leaving": True}
    waiting = asyncio.create_task(announced(service, lambda: not directory.replicas(AGENT)))
    await nc.publish(SUBJECT, json.dumps(farewell).encode())
    await waiting
