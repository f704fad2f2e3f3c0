"""Bad input gets the answers LangGraph's SDKs expect: 404 for what does not exist,
409 for a busy thread, 422 for a malformed request, 403 for a role without the right."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError

# On SQLite and on PostgreSQL (a real cluster the tests start).
pytestmark = pytest.mark.both_backends

ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.shared_deployment
async def test_unknown_assistant_and_thread(sdk: LangGraphClient) -> None:
    with pytest.raises(NotFoundError, match="assistant nobody"):
        await sdk.assistants.get("nobody")
    with pytest.raises(NotFoundError):
        await sdk.runs.create(None, "nobody", input=QUESTION)
    missing = str(uuid.uuid4())
    with pytest.raises(NotFoundError, match=f"thread {missing}"):
        await sdk.threads.get(missing)
    with pytest.raises(NotFoundError):
        await sdk.runs.create(missing, ASSISTANT, input=QUESTION)
    # if_not_exists="create" makes it instead.
    run = await sdk.runs.create(missing, ASSISTANT, input=QUESTION, if_not_exists="create")
    assert run["thread_id"] == missing


@pytest.mark.shared_deployment
async def test_malformed_requests(sdk: LangGraphClient, api_url: str) -> None:
    runs: Any = sdk.runs  # the SDK's types refuse these values before sending them
    with pytest.raises(UnprocessableEntityError, match="stream_mode"):
        await runs.create(None, ASSISTANT, input=QUESTION, stream_mode="sideways")
    with pytest.raises(UnprocessableEntityError, match="multitask_strategy"):
        await runs.create(None, ASSISTANT, input=QUESTION, multitask_strategy="shout")
    with pytest.raises(UnprocessableEntityError, match="after_seconds must be"):
        await sdk.runs.create(None, ASSISTANT, input=QUESTION, after_seconds=-5)
    with pytest.raises(UnprocessableEntityError, match="interrupt_before"):
        await runs.create(None, ASSISTANT, input=QUESTION, interrupt_before="plan")
    async with httpx.AsyncClient(base_url=api_url) as http:
        bad = await http.post(
            "/threads", content=b"{not json", headers={"Content-Type": "application/json"}
        )
        assert bad.status_code == 422 and "JSON" in bad.json()["detail"]
        listed = await http.post("/threads/search", json=[1, 2])
        assert listed.status_code == 422 and listed.json()["detail"]
