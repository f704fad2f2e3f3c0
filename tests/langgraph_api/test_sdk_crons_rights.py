"""A cron is its maker's, as a thread is (decisions 309-311): a panel sees, changes
and deletes its own crons only, and a cron on a thread it cannot see is not found;
operators see every cron. A run started later is its maker's too. Read with
LangGraph's own SDK client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from typing import Any

import httpx
import pytest
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer

from tests.langgraph_api.test_sdk_crons import ASSISTANT, EVERY_2S, cron_runs, eventually
from tests.support.agents import Agent
from tests.support.langgraph_host import THREADPLANE, hosted
from tests.support.nats import NatsServer

pytestmark = [pytest.mark.timeout(120)]

ROLES = {
    "panel-a": "panel",
    "panel-b": "panel",
    "operator": "operator",
    "agent": f"agent:{ASSISTANT}",
}


@pytest.fixture
def roles() -> dict[str, str]:
    return ROLES


@pytest.fixture
async def host(
    service: TurnkeeperServer, nats_server: NatsServer, tokens: dict[str, str]
) -> AsyncIterator[Agent]:
    async with hosted(
        THREADPLANE,
        service,
        nats_server,
        replica="lg-crons",
        token=tokens["agent"],
        step_delay=0.05,
    ) as agent:
        yield agent


@pytest.fixture
def sdks(sdks: dict[str, LangGraphClient], host: Agent) -> dict[str, LangGraphClient]:
    """The conftest's clients, once the host serves the assistant."""
    return sdks


async def _status(call: Awaitable[Any]) -> int:
    try:
        await call
    except httpx.HTTPStatusError as exc:
        return exc.response.status_code
    return 200


async def test_a_panel_sees_and_changes_its_own_crons_only(
    sdks: dict[str, LangGraphClient],
) -> None:
    mine, theirs = sdks["panel-a"], sdks["panel-b"]
    thread: Any = await mine.threads.create()
    thread_id = thread["thread_id"]
    cron: Any = await mine.crons.create_for_thread(thread_id, ASSISTANT, schedule="0 3 * * *")
    cron_id = cron["cron_id"]
    later: Any = await mine.runs.create(thread_id, ASSISTANT, input={}, after_seconds=600)

    for call in (
        theirs.crons.update(cron_id, enabled=False),
        theirs.crons.delete(cron_id),
        theirs.crons.create_for_thread(thread_id, ASSISTANT, schedule="* * * * *"),
        theirs.runs.get(thread_id, later["run_id"]),
        theirs.runs.cancel(thread_id, later["run_id"]),
    ):
        assert await _status(call) == 404
    assert await theirs.crons.search() == []
    assert await theirs.crons.count() == 0
    assert await mine.crons.count() == 1
    assert [c["cron_id"] for c in await sdks["operator"].crons.search()] == [cron_id]

    got: Any = await mine.runs.get(thread_id, later["run_id"])
    assert got["status"] == "pending"
    # Cancelling is CancelTurn's right, as for a run that started: not a panel's.
    assert await _status(mine.runs.cancel(thread_id, later["run_id"])) == 403
    await sdks["operator"].runs.cancel(thread_id, later["run_id"])
    assert await _status(mine.runs.get(thread_id, later["run_id"])) == 404
    await mine.crons.delete(cron_id)
    assert await sdks["operator"].crons.count() == 0


async def test_a_cron_made_with_a_token_fires_under_that_token(
    sdks: dict[str, LangGraphClient],
) -> None:
    # Its maker's token is looked up by its name when a tick fires (the tokens file
    # is keyed by the tokens' hashes): the run starts as the panel's, seen by it.
    panel = sdks["panel-a"]
    question: Any = {"messages": [{"role": "user", "content": "t"}]}
    cron: Any = await panel.crons.create(ASSISTANT, schedule=EVERY_2S, input=question)

    async def first_run() -> list[str] | None:
        return await cron_runs(panel, cron["cron_id"]) or None

    run_ids = await eventually(first_run, "the cron's first run")
    thread = (await panel.threads.search(metadata={"cron_id": cron["cron_id"]}))[0]
    run = await panel.runs.join(thread["thread_id"], run_ids[0])
    assert run is not None
    assert (await panel.runs.get(thread["thread_id"], run_ids[0]))["status"] == "success"
    assert (await panel.crons.search())[0].get("cron_id") == cron["cron_id"]
    await panel.crons.delete(cron["cron_id"])
