"""What the LangGraph API takes at its entrances (issue 47, Medium 6): a thread id
made with POST /threads passes the same checks as one in a path (decision 188), a
body with a lone surrogate is refused before anything is stored, numbers too large
for an integer are a 422, and a Last-Event-ID past what the store holds is refused
instead of ending the stream with an internal error."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

pytestmark = [pytest.mark.timeout(120)]

JSON = {"content-type": "application/json"}


async def test_post_threads_checks_the_id_and_the_body(api_url: str) -> None:
    async with httpx.AsyncClient(base_url=api_url) as http:
        for bad in ("t" * 5000, "a\x00b", "a\x1bb", "a\u202eb"):
            refused = await http.post("/threads", json={"thread_id": bad})
            assert refused.status_code == 422, (bad[:10], refused.text)
        lone = await http.post(
            "/threads", content='{"metadata": {"name": "\\ud800"}}', headers=JSON
        )
        assert lone.status_code == 422 and "surrogate" in lone.json()["detail"]
        paired = await http.post(
            "/threads", content='{"metadata": {"name": "\\ud83d\\ude00"}}', headers=JSON
        )
        assert paired.status_code == 200 and paired.json()["metadata"]["name"] == "\U0001f600"
        found = await http.post("/threads/search", json={})
        assert found.status_code == 200 and len(found.json()) == 1
        huge = await http.post("/threads/search", content='{"limit": 1e400}', headers=JSON)
        assert huge.status_code == 422, huge.text


@pytest.mark.shared_deployment
async def test_a_last_event_id_past_64_bits_is_no_event_of_the_run(
    sdk: LangGraphClient, api_url: str
) -> None:
    thread = await sdk.threads.create()
    run: Any = await sdk.runs.create(thread["thread_id"], "approval", input={"topic": "ids"})
    await sdk.runs.join(thread["thread_id"], run["run_id"])
    path = f"/threads/{thread['thread_id']}/runs/{run['run_id']}/stream"
    async with httpx.AsyncClient(base_url=api_url) as http:
        # As LangGraph's server reads an id it has no event for: nothing replayed
        # (decision 297); the service's own event route still refuses it.
        unknown = await http.get(path, headers={"Last-Event-ID": str(2**64)})
        assert unknown.status_code == 200, unknown.text
        assert "event: values" not in unknown.text
        events = await http.get(
            f"/v1/turns/{run['run_id']}/events", headers={"Last-Event-ID": str(2**64)}
        )
        assert events.status_code == 400 or events.status_code == 422, events.text
