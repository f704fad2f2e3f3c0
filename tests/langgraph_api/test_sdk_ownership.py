"""Threads have owners (issue 47): the identity that created a thread is recorded
with it, on both backends, and a panel or an agent token sees and acts on its own
threads only; operators see every thread. Read with LangGraph's own SDK client."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient

pytestmark = [pytest.mark.slow, pytest.mark.both_backends, pytest.mark.timeout(120)]

ROLES = {
    "panel-a": "panel",
    "panel-b": "panel",
    "operator": "operator",
    "agent": "agent:durable-execution",
    "other-agent": "agent:other",
}


@pytest.fixture
def roles() -> dict[str, str]:
    return ROLES


async def _status(call: Awaitable[Any]) -> int:
    try:
        await call
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return 200


async def test_a_panel_sees_and_changes_its_own_threads_only(
    sdks: dict[str, LangGraphClient],
) -> None:
    mine = await sdks["panel-a"].threads.create(metadata={"user": "a"})
    theirs = sdks["panel-b"]
    thread_id = mine["thread_id"]
    got: Any = await sdks["panel-a"].threads.get(thread_id)
    assert got["metadata"]["user"] == "a"
    for call in (
        theirs.threads.get(thread_id),
        theirs.threads.update(thread_id, metadata={"user": "b"}),
        theirs.threads.get_state(thread_id),
        theirs.threads.get_history(thread_id),
        theirs.runs.list(thread_id),
    ):
        assert await _status(call) == 404
    assert [t["thread_id"] for t in await theirs.threads.search()] == []
    assert await theirs.threads.count() == 0
    assert [t["thread_id"] for t in await sdks["panel-a"].threads.search()] == [thread_id]
    # Operators see every thread.
    seen = [t["thread_id"] for t in await sdks["operator"].threads.search()]
    assert seen == [thread_id]
    seen_by_operator: Any = await sdks["operator"].threads.get(thread_id)
    assert seen_by_operator["metadata"] == {"user": "a"}


async def test_an_agent_token_cannot_take_another_callers_thread_that_has_no_runs(
    sdks: dict[str, LangGraphClient],
) -> None:
    """Before: an agent saw every thread without runs (its agents were the empty set,
    a subset of its own), read and patched its metadata, copied and deleted it."""
    panels = await sdks["panel-a"].threads.create(metadata={"user": "a"})
    thread_id = panels["thread_id"]
    agent = sdks["other-agent"]
    for call in (
        agent.threads.get(thread_id),
        agent.threads.update(thread_id, metadata={"taken": True}),
        agent.threads.copy(thread_id),
        agent.threads.delete(thread_id),
    ):
        assert await _status(call) == 404
    assert await agent.threads.search() == []
    kept: Any = await sdks["panel-a"].threads.get(thread_id)
    assert kept["metadata"] == {"user": "a"}
    # Its own thread, made with no run yet, it sees.
    own = await agent.threads.create()
    assert [t["thread_id"] for t in await agent.threads.search()] == [own["thread_id"]]
