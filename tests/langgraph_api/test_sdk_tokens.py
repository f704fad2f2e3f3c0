"""The LangGraph API with the service's tokens: the SDKs' API key (`x-api-key`) is a
bearer token, and each role keeps exactly its rights."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.errors import PermissionDeniedError
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent
from tests.support.langgraph_host import THREADPLANE, hosted
from tests.support.nats import NatsServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ASSISTANT = "durable-execution"
ROLES = {"agent": f"agent:{ASSISTANT}", "panel": "panel", "operator": "operator"}
QUESTION: Any = {"messages": [{"role": "user", "content": "who may do what?"}]}


@pytest.fixture
def roles() -> dict[str, str]:
    return ROLES


@pytest.fixture
async def secured_host(
    service: TurnkeeperServer, nats_server: NatsServer, tokens: dict[str, str]
) -> AsyncIterator[Agent]:
    async with hosted(
        THREADPLANE,
        service,
        nats_server,
        replica="lg-secure",
        token=tokens["agent"],
        step_delay=0.05,
    ) as agent:
        yield agent


async def test_api_keys_are_tokens_and_roles_keep_their_rights(
    api_url: str,
    service: TurnkeeperServer,
    tokens: dict[str, str],
    secured_host: Agent,
) -> None:
    async with httpx.AsyncClient(base_url=api_url) as anonymous:
        refused = await anonymous.post("/threads/search", json={})
        assert refused.status_code == 401 and refused.json()["detail"]
        wrong = await anonymous.post("/threads/search", json={}, headers={"x-api-key": "tk-nope"})
        assert wrong.status_code == 401

    panel = get_client(url=api_url, api_key=tokens["panel"])
    operator = get_client(url=api_url, api_key=tokens["operator"])
    try:
        assert [a["graph_id"] for a in await panel.assistants.search()] == [ASSISTANT]
        thread = await panel.threads.create()
        waited: Any = await panel.runs.wait(thread["thread_id"], ASSISTANT, input=QUESTION)
        assert waited["step"] == "generate"
        # Started through the relay with the panel's assertion, as the panel.
        [run] = await panel.runs.list(thread["thread_id"])
        second = await panel.runs.create(thread["thread_id"], ASSISTANT, input=QUESTION)
        with pytest.raises(PermissionDeniedError):
            await panel.runs.cancel(thread["thread_id"], second["run_id"])
        for many in (
            panel.runs.cancel_many(thread_id=thread["thread_id"], run_ids=[second["run_id"]]),
            panel.runs.cancel_many(status="all"),
        ):
            with pytest.raises(PermissionDeniedError):
                await many
        with pytest.raises(PermissionDeniedError):
            await panel.threads.delete(thread["thread_id"])
        await operator.runs.cancel(thread["thread_id"], second["run_id"], wait=True)
        options = ConnectionOptions(target=service.address, bearer_token=tokens["operator"])
        async with AsyncTurnkeeperClient(options) as client:
            status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run["run_id"]))
            assert status.state == turns_pb2.TURN_STATE_DONE
    finally:
        for sdk in (panel, operator):
            await sdk.http.client.aclose()
