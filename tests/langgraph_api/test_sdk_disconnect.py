"""on_disconnect: a streamed run whose client goes away is cancelled when it asked
for that ("cancel"), and goes on otherwise ("continue", LangGraph's default)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.web.pump import KEEPALIVE_SECONDS

from tests.support.langgraph_host import THREADPLANE, hosted
from tests.support.nats import NatsServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

QUESTION: Any = {"messages": [{"role": "user", "content": "still there?"}]}


async def leave_after_metadata(api_url: str, on_disconnect: str) -> tuple[str, str]:
    """Open a stream, read its metadata, hang up; (thread_id, run_id)."""
    async with httpx.AsyncClient(base_url=api_url) as http:
        thread = (await http.post("/threads", json={})).json()
        async with http.stream(
            "POST",
            f"/threads/{thread['thread_id']}/runs/stream",
            json={
                "assistant_id": "durable-execution",
                "input": QUESTION,
                "on_disconnect": on_disconnect,
                "stream_mode": ["updates"],
            },
        ) as response:
            assert response.status_code == 200
            run_id = response.headers["Content-Location"].rsplit("/", 1)[1]
            async for line in response.aiter_lines():
                if line.startswith("event: metadata"):
                    break
    return thread["thread_id"], run_id


async def leave_a_wait(api_url: str, on_disconnect: str) -> tuple[str, str]:
    """Start a runs.wait, take its 200 (sent at once, as the reference's), hang up;
    (thread_id, run_id)."""
    async with httpx.AsyncClient(base_url=api_url) as http:
        thread = (await http.post("/threads", json={})).json()
        async with http.stream(
            "POST",
            f"/threads/{thread['thread_id']}/runs/wait",
            json={
                "assistant_id": "durable-execution",
                "input": QUESTION,
                "on_disconnect": on_disconnect,
            },
        ) as response:
            assert response.status_code == 200
            run_id = response.headers["Content-Location"].rsplit("/", 1)[1]
    return thread["thread_id"], run_id


async def test_a_client_gone_cancels_only_when_asked(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    api_url: str,
    client: AsyncTurnkeeperClient,
) -> None:
    # Each step takes a second: the first part is written after the client left.
    async with (
        hosted(THREADPLANE, service, nats_server, replica="lg-leave", step_delay=1.0),
        get_client(url=api_url) as sdk,
    ):
        for on_disconnect, ended in (
            ("cancel", turns_pb2.TURN_STATE_CANCELLED),
            ("continue", turns_pb2.TURN_STATE_DONE),
        ):
            thread_id, run_id = await leave_after_metadata(api_url, on_disconnect)
            await sdk.runs.join(thread_id, run_id)
            status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run_id))
            assert status.state == ended, on_disconnect


async def test_a_client_gone_cancels_at_once_not_at_the_next_write(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    api_url: str,
    client: AsyncTurnkeeperClient,
) -> None:
    """on_disconnect=cancel, as LangGraph's server does it: the run is cancelled when
    its client leaves. The stream's next write would be its heartbeat
    (KEEPALIVE_SECONDS) or the first step's parts (a minute away here); the run
    ends well before either."""
    async with (
        hosted(THREADPLANE, service, nats_server, replica="lg-leave-now", step_delay=60.0),
        get_client(url=api_url) as sdk,
    ):
        for leave in (leave_after_metadata, leave_a_wait):
            thread_id, run_id = await leave(api_url, "cancel")
            left = time.monotonic()
            await sdk.runs.join(thread_id, run_id)
            assert time.monotonic() - left < KEEPALIVE_SECONDS, leave.__name__
            status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run_id))
            assert status.state == turns_pb2.TURN_STATE_CANCELLED, leave.__name__
