"""`runs.cancel_many` (POST /runs/cancel) through LangGraph's Python SDK unchanged:
a thread's runs by their ids, or every run of a status (`pending`: queued, or due
later; `running`; `all`), each cancelled as `runs.cancel` cancels one; 404 when no
run matches, 422 for a call it cannot read (a few LangGraph's server lets through:
decision 799)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.paused_runs import GRAPH, paused_runs, until_paused

pytestmark = pytest.mark.both_backends


@pytest.fixture
async def lg(
    service: TurnkeeperServer, nats_server: NatsServer, api_url: str
) -> AsyncIterator[LangGraphClient]:
    async with paused_runs(service, nats_server, api_url, replica="cancel-many") as sdk:
        yield sdk


async def _status_of(call: Any) -> tuple[int, str]:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        await call
    response = caught.value.response
    return response.status_code, response.json()["detail"]


async def _running(sdk: LangGraphClient, thread_id: str, run_id: str) -> None:
    await until_paused(sdk, thread_id, run_id)
    assert (await sdk.runs.get(thread_id, run_id))["status"] == "running"


async def _ended(sdk: LangGraphClient, thread_id: str, run_id: str) -> str:
    await sdk.runs.join(thread_id, run_id)
    return str((await sdk.runs.get(thread_id, run_id))["status"])


async def test_by_status_then_by_ids(lg: LangGraphClient, client: AsyncTurnkeeperClient) -> None:
    """`running` takes the running runs alone (the run queued behind one then starts);
    `pending` the queued and the one due later; ids take the runs they name on their
    thread, and `rollback` takes a run's checkpoints with it."""
    first, second = [(await lg.threads.create())["thread_id"] for _ in range(2)]
    running = [(await lg.runs.create(t, GRAPH, input={}))["run_id"] for t in (first, second)]
    queued = (await lg.runs.create(first, GRAPH, input={}, multitask_strategy="enqueue"))["run_id"]
    later = (await lg.runs.create(second, GRAPH, input={}, after_seconds=3600))["run_id"]
    for thread, run_id in zip((first, second), running, strict=True):
        await _running(lg, thread, run_id)
    assert (await lg.runs.get(first, queued))["status"] == "pending"

    await lg.runs.cancel_many(status="running")
    for thread, run_id in zip((first, second), running, strict=True):
        assert await _ended(lg, thread, run_id) == "interrupted"
    # The queued run was pending, not running: it started when the first ended.
    await _running(lg, first, queued)
    assert (await lg.runs.get(second, later))["status"] == "pending"

    await lg.runs.cancel_many(status="pending")
    assert await _status_of(lg.runs.get(second, later)) == (404, f"run {later} not found")
    assert (await lg.runs.get(first, queued))["status"] == "running"
    # A status in any case, as the reference reads it.
    assert await _status_of(lg.runs.cancel_many(status=cast(Any, "PENDING"))) == (
        404,
        "No runs found to cancel.",
    )

    # By ids: one of another thread is not this thread's (not found, left alone).
    third = (await lg.threads.create())["thread_id"]
    other = (await lg.runs.create(third, GRAPH, input={}))["run_id"]
    await _running(lg, third, other)
    assert await _status_of(lg.runs.cancel_many(thread_id=first, run_ids=[other])) == (
        404,
        "No runs found to cancel.",
    )
    await lg.runs.cancel_many(thread_id=first, run_ids=[queued, "no-such-run"], action="rollback")
    assert await _ended(lg, first, queued) == "interrupted"
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=queued))
    assert status.state == turns_pb2.TURN_STATE_CANCELLED
    assert (await lg.runs.get(third, other))["status"] == "running"
    # A run that is over is found, and left as it is.
    await lg.runs.cancel_many(thread_id=first, run_ids=[running[0]])
    await lg.runs.cancel_many(status="all")
    assert await _ended(lg, third, other) == "interrupted"


@pytest.mark.parametrize(
    ("body", "params", "detail"),
    [
        ({"status": "done"}, {}, "status must be 'pending', 'running' or 'all'"),
        ({"status": 3}, {}, "status must be 'pending', 'running' or 'all'"),
        ({"status": "all", "thread_id": "t"}, {}, "a status cancels every run of that status"),
        ({"status": "all", "run_ids": ["r"]}, {}, "a status cancels every run of that status"),
        ({}, {}, "send a status, or a thread_id and run_ids"),
        ({"thread_id": "t"}, {}, "send a status, or a thread_id and run_ids"),
        ({"thread_id": "t", "run_ids": []}, {}, "send a status, or a thread_id and run_ids"),
        ({"thread_id": "t", "run_ids": [1]}, {}, "send a status, or a thread_id and run_ids"),
        ({"run_ids": ["r"]}, {}, "send a status, or a thread_id and run_ids"),
        ({"status": "all", "assistant_id": "a"}, {}, "unknown field(s) assistant_id"),
        ({"status": "all"}, {"action": "stop"}, "action must be 'interrupt' or 'rollback'"),
    ],
)
async def test_a_call_it_cannot_read_is_a_422_that_says_why(
    api_url: str, body: dict[str, Any], params: dict[str, str], detail: str
) -> None:
    async with httpx.AsyncClient(base_url=api_url) as http:
        answer = await http.post("/runs/cancel", json=body, params=params)
    assert answer.status_code == 422
    assert answer.json()["detail"].startswith(detail)
