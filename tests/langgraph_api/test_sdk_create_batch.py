"""`runs.create_batch` (POST /runs/batch) through LangGraph's Python SDK unchanged:
thread-less runs started together, each as `runs.create` starts one (later too),
answered as the list of their runs; a batch with a run it cannot start starts none (decision
800)."""

from __future__ import annotations

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


@pytest.mark.shared_deployment
@pytest.mark.parametrize(
    ("batch", "status", "detail"),
    [
        ([], 422, "send a list of 1 to 1000 runs"),
        ({"assistant_id": APPROVAL}, 422, "the body must be a JSON array"),
        ([{"assistant_id": APPROVAL, "input": {}}, 3], 422, "run 1: a run must be a JSON object"),
        (
            [{"assistant_id": APPROVAL, "input": {}, "thread_id": "t"}],
            422,
            "run 0: thread_id: a batch starts thread-less runs",
        ),
        (
            [{"assistant_id": APPROVAL, "input": {}, "after_seconds": -1}],
            422,
            "run 0: after_seconds must be a number of seconds",
        ),
        (
            [{"assistant_id": APPROVAL, "input": {}, "durability": "exit"}],
            422,
            "run 0: durability",
        ),
        (
            [{"assistant_id": APPROVAL, "input": {}}, {"assistant_id": "nobody", "input": {}}],
            404,
            "run 1: assistant nobody not found",
        ),
    ],
)
async def test_a_batch_with_a_run_it_cannot_start_starts_none(
    sdk: LangGraphClient, served: str, batch: Any, status: int, detail: str
) -> None:
    # The worker's deployment: its tests run one at a time, so the count is this one's.
    before = await sdk.threads.count()
    async with httpx.AsyncClient(base_url=served) as http:
        answer = await http.post("/runs/batch", json=batch)
    assert answer.status_code == status
    assert answer.json()["detail"].startswith(detail)
    assert await sdk.threads.count() == before  # no run made a thread
