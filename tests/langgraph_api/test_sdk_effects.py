"""A run's effects through LangGraph's API (a turnkeeper addition,
docs/langgraph-api.md): `GET /threads/{thread_id}/runs/{run_id}/effects` lists the
calls the run's tools made through the effect ledger, read with LangGraph's own SDK
client's HTTP layer."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError

pytestmark = [pytest.mark.slow, pytest.mark.both_backends, pytest.mark.timeout(120)]


@pytest.mark.shared_deployment
async def test_a_run_lists_the_effects_its_tools_made(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    run = await sdk.runs.create(thread["thread_id"], "effects", input={"amount": 5})
    out: Any = await sdk.runs.join(thread["thread_id"], run["run_id"])
    [receipt] = out["receipts"]

    path = f"/threads/{thread['thread_id']}/runs/{run['run_id']}/effects"
    listed: Any = await sdk.http.get(path)
    assert listed["run_id"] == run["run_id"]
    [effect] = listed["effects"]
    assert effect["name"].endswith("charge") and effect["state"] == "DONE"
    assert effect["args"] == {"amount": 5} and effect["policy"] == "retry"
    assert effect["outcome"] == receipt == f"charged 5 under {effect['key']}"
    assert effect["attempt"] == 0 and effect["key"].startswith("fx-")

    # Another thread's path, or a run that does not exist: 404, as for the run itself.
    other = await sdk.threads.create()
    with pytest.raises(NotFoundError):
        await sdk.http.get(f"/threads/{other['thread_id']}/runs/{run['run_id']}/effects")
    with pytest.raises(NotFoundError):
        await sdk.http.get(f"/threads/{thread['thread_id']}/runs/no-such-run/effects")
