"""`runs.create_batch` (POST /runs/batch) through LangGraph's Python SDK unchanged:
thread-less runs started together, each as `runs.create` starts one (later too),
answered as the list of their runs; a batch with a run it cannot start starts none (decision
800)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

pytestmark = pytest.mark.both_backends

APPROVAL = "approval"


@pytest.mark.shared_deployment
async def test_each_run_starts_on_a_thread_of_its_own(sdk: LangGraphClient) -> None:
    # The SDK types a run as a total TypedDict; it sends what it is given.
    payloads: Any = [
        {"assistant_id": APPROVAL, "input": {"topic": topic}, "metadata": {"n": n}}
        for n, topic in enumerate(("one", "two", "three"))
    ]
    runs: list[Any] = await sdk.runs.create_batch(payloads)
    assert [r["status"] for r in runs] == ["pending"] * 3
    assert [r["metadata"]["n"] for r in runs] == [0, 1, 2]
    assert len({r["thread_id"] for r in runs}) == 3
    for run, topic in zip(runs, ("one", "two", "three"), strict=True):
        joined: Any = await sdk.runs.join(run["thread_id"], run["run_id"])
        assert joined["__interrupt__"][0]["value"]["draft"] == f"a draft about {topic}"
        assert (await sdk.runs.get(run["thread_id"], run["run_id"]))["status"] == "success"


@pytest.mark.shared_deployment
async def test_a_batched_run_may_start_later(sdk: LangGraphClient) -> None:
    """As `runs.create(after_seconds=...)`: pending, on its thread, until due."""
    payloads: Any = [
        {"assistant_id": APPROVAL, "input": {"topic": "now"}},
        {"assistant_id": APPROVAL, "input": {"topic": "later"}, "after_seconds": 3600},
    ]
    now, later = await sdk.runs.create_batch(payloads)
    await sdk.runs.join(now["thread_id"], now["run_id"])
    assert (await sdk.runs.get(now["thread_id"], now["run_id"]))["status"] == "success"
    assert (await sdk.runs.get(later["thread_id"], later["run_id"]))["status"] == "pending"
    assert later["thread_id"] != now["thread_id"]
    await sdk.runs.cancel(later["thread_id"], later["run_id"])
    with pytest.raises(httpx.HTTPStatusError):
        await sdk.runs.get(later["thread_id"], later["run_id"])


# Stands for an assistant the test makes: the threads its runs would make are counted.
OURS = "ours"


@pytest.mark.shared_deployment
@pytest.mark.parametrize(
    ("batch", "status", "detail"),
    [
        ([], 422, "send a list of 1 to 1000 runs"),
        ({"assistant_id": OURS}, 422, "the body must be a JSON array"),
        ([{"assistant_id": OURS, "input": {}}, 3], 422, "run 1: a run must be a JSON object"),
        (
            [{"assistant_id": OURS, "input": {}, "thread_id": "t"}],
            422,
            "run 0: thread_id: a batch starts thread-less runs",
        ),
        (
            [{"assistant_id": OURS, "input": {}, "after_seconds": -1}],
            422,
            "run 0: after_seconds must be a number of seconds",
        ),
        (
            [{"assistant_id": OURS, "input": {}, "durability": "exit"}],
            422,
            "run 0: durability",
        ),
        (
            [{"assistant_id": OURS, "input": {}}, {"assistant_id": "nobody", "input": {}}],
            404,
            "run 1: assistant nobody not found",
        ),
    ],
)
async def test_a_batch_with_a_run_it_cannot_start_starts_none(
    sdk: LangGraphClient, served: str, batch: Any, status: int, detail: str
) -> None:
    # A run tags the thread it makes with its assistant: one of this test's own
    # counts what this batch made, whatever else the shared deployment runs.
    ours = (await sdk.assistants.create(graph_id=APPROVAL))["assistant_id"]
    sent = json.loads(json.dumps(batch).replace(f'"{OURS}"', f'"{ours}"'))
    async with httpx.AsyncClient(base_url=served) as http:
        answer = await http.post("/runs/batch", json=sent)
    assert answer.status_code == status
    assert answer.json()["detail"].startswith(detail)
    assert await sdk.threads.count(metadata={"assistant_id": ours}) == 0  # no run made one
