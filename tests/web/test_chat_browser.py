"""The chat page in headless Chromium, talking to the pipeline agent through the
service's relay: the Pipeline sidebar's rules, and Retry offered only when retryable.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent, all_events
from tests.support.nats import NatsServer
from tests.support.pages import open_page, recorded, reply_seqs
from tests.support.procs import spawn_python
from tests.support.relay import Relay

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]


class Pipelines:
    """Pipeline agents (tests/agents/pipeline_agent.py) as real subprocesses."""

    def __init__(self, service: str, nats_url: str) -> None:
        self.service = service
        self.nats_url = nats_url
        self.started: list[Agent] = []

    async def start(
        self,
        agent: str = "pipeline",
        delay: float = 0.0,
        approve: bool = False,
        shutdown_grace: float | None = None,
    ) -> Agent:
        """An agent; `shutdown_grace`: how long its SIGTERM lets a running turn go on
        (the bridge's 10 s unless given), for a test that leaves one running."""
        env = {
            **os.environ,
            "PIPELINE_DELAY": str(delay),
            "PIPELINE_APPROVE": "1" if approve else "0",
            "TURNKEEPER_ADDRESS": self.service,
            "NATS_URL": self.nats_url,
            "TURNKEEPER_AGENT": agent,
            "TURNKEEPER_REPLICA": f"{agent}-1",
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            "PYTHONUNBUFFERED": "1",
        }
        if shutdown_grace is not None:
            env["TURNKEEPER_SHUTDOWN_GRACE"] = str(shutdown_grace)
        child = await spawn_python(
            "-m",
            "tests.agents.pipeline_agent",
            cwd=REPO,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
        )
        started = Agent(child, agent)
        self.started.append(started)
        await started.ready()
        return started


@pytest.fixture
async def pipelines(
    web_service: TurnkeeperServer, nats_server: NatsServer
) -> AsyncIterator[Pipelines]:
    agents = Pipelines(web_service.address, nats_server.url)
    try:
        yield agents
    finally:
        await asyncio.gather(*(a.close() for a in agents.started), return_exceptions=True)
        for agent in agents.started:
            print(f"--- agent {agent.name} ---\n{agent.output()}")


# The sidebar before a run: the agent's graph's nodes (decision 219), all pending.
BEFORE = "pending,pending,pending"
# Every state the sidebar shows during one pipeline run, in order.
RUN = [
    "active,pending,pending",
    "complete,active,pending",
    "complete,complete,active",
    "complete,complete,complete",
]


def chat_url(service: TurnkeeperServer, agent: str) -> str:
    assert service.web is not None
    return f"{service.web.url}console/chat?agent={agent}"


async def ask(page: Page, question: str) -> None:
    await page.fill("#question", question)
    await page.click("#submit")


async def graph_shown(page: Page, nodes: int = 3) -> None:
    """Until the sidebar lists the agent's graph's nodes (asked of a replica)."""
    await expect(page.locator("#pipeline li")).to_have_count(nodes)


async def answered(page: Page, count: int) -> None:
    """Until the `count`-th reply is in and its run has ended."""
    replies = page.locator(".message.agent .text")
    await expect(replies).to_have_count(count)
    await expect(replies.nth(count - 1)).not_to_be_empty()
    await expect(page.locator("#chat-status")).to_have_text("done")
    await expect(page.locator("#submit")).to_be_enabled()


async def sidebar(page: Page) -> str:
    states: list[str] = await page.eval_on_selector_all(
        "#pipeline li", "items => items.map(li => li.dataset.state)"
    )
    return ",".join(states)


async def test_sidebar_shows_the_graphs_nodes_as_they_finish_and_a_second_question_starts_over(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start()
    page = await open_page(browser, chat_url(web_service, "pipeline"))
    # Before any run the sidebar is the agent's graph's nodes, all pending.
    await graph_shown(page)
    assert await sidebar(page) == BEFORE
    # Its graph has `messages`, but the bridge maps its input ({question, id}): the
    # page sends the pipeline's shape (decision 324).
    await expect(page.locator("body")).to_have_attribute("data-input", "question")
    await ask(page, "What is a turn?")
    await answered(page, 1)
    # The run is over: its steps are complete and nothing is active (the header: done).
    assert await sidebar(page) == "complete,complete,complete"
    await ask(page, "Why does it matter?")
    await answered(page, 2)

    # Every state the sidebar ever showed, in order: while the run goes on the first
    # node not complete is active; each step event completes a node; the second
    # question starts over.
    assert (await recorded(page))["sidebar"] == [BEFORE, *RUN, *RUN]
    texts = await page.locator(".message .text").all_inner_texts()
    assert texts[0] == "What is a turn?" and texts[2] == "Why does it matter?"
    assert "turn" in texts[1].lower() and texts[3]
    await expect(page.locator("#retry")).to_be_hidden()
    await expect(page.locator("#regenerate")).to_be_visible()
    await page.context.close()


async def test_retry_is_offered_only_for_a_request_that_reached_no_agent(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    assert await web_service.link.wait_connected(10)
    page = await open_page(browser, chat_url(web_service, "late"))
    await expect(page.locator("#retry")).to_be_hidden()  # nothing to retry yet
    await ask(page, "Anyone there?")
    error = page.locator("#chat-error")
    await expect(error).to_contain_text("Not sent: no replica of agent 'late' is listening")
    await expect(page.locator("#retry")).to_be_visible()

    # The agent comes up; Retry sends the same request again, and it runs.
    agent = await pipelines.start("late")
    await page.click("#retry")
    await answered(page, 1)
    await expect(page.locator("#retry")).to_be_hidden()
    await expect(error).to_be_empty()

    # A request that went out but got no answer may have been acted on: no Retry.
    agent.signal(signal.SIGSTOP)
    try:
        await ask(page, "Are you frozen?")
        await expect(error).to_contain_text("Failed: agent 'late' did not answer")
        await expect(page.locator("#retry")).to_be_hidden()
    finally:
        agent.signal(signal.SIGCONT)
    await page.context.close()


async def until_over(service: TurnkeeperServer, turn_id: str) -> None:
    """Until the run's terminal event (WatchTurn ends after it)."""
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service.address)) as client:
        async for _ in client.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
            pass


async def test_a_dropped_network_is_interrupted_not_retryable_and_reattaches_without_a_duplicate(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start(delay=1.0)
    assert web_service.web is not None
    # The browser's only path to the service: a TCP relay the test can cut.
    relay = Relay(web_service.web.port)
    await relay.start()
    try:
        page = await open_page(
            browser, f"http://127.0.0.1:{relay.port}/console/chat?agent=pipeline"
        )
        await graph_shown(page)
        await ask(page, "What survives a dropped network?")
        reply = page.locator(".message.agent")
        await expect(reply).to_have_attribute("data-turn-id", re.compile(r".+"))
        turn_id = await reply.get_attribute("data-turn-id")
        assert turn_id is not None
        # Mid-run (analyze has finished, plan runs): the network goes.
        await expect(page.locator('#pipeline li[data-step="analyze"]')).to_have_attribute(
            "data-state", "complete"
        )
        relay.shut()
        await expect(page.locator("#chat-error")).to_contain_text("interrupted")
        await expect(page.locator("#check")).to_be_visible()
        await expect(page.locator("#retry")).to_be_hidden()  # it may have gone on
        await until_over(web_service, turn_id)
        relay.open()
        # The page re-attaches by itself after the last event it showed.
        await expect(page.locator("#chat-status")).to_have_text("done")
        await expect(page.locator("#chat-error")).to_be_empty()
        await expect(page.locator("#check")).to_be_hidden()
    finally:
        await relay.stop()
    async with AsyncTurnkeeperClient(ConnectionOptions(target=web_service.address)) as client:
        retained = await all_events(client, turn_id)
    # Every event applied once, in order, none missing.
    assert (await reply_seqs(page))[turn_id] == [e.seq for e in retained]
    assert (await recorded(page))["sidebar"] == [BEFORE, *RUN]
    assert (await reply.locator(".text").inner_text()).startswith("Answer: ")
    await page.context.close()


async def test_stop_then_check_status_picks_up_the_finished_run(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start(delay=1.0)
    page = await open_page(browser, chat_url(web_service, "pipeline"))
    await graph_shown(page)
    await ask(page, "Can I look away?")
    reply = page.locator(".message.agent")
    await expect(page.locator('#pipeline li[data-step="analyze"]')).to_have_attribute(
        "data-state", "complete"
    )
    turn_id = await reply.get_attribute("data-turn-id")
    assert turn_id is not None
    await page.click("#stop")
    await expect(page.locator("#chat-error")).to_contain_text("Stopped")
    await expect(page.locator("#check")).to_be_visible()
    await expect(page.locator("#retry")).to_be_hidden()
    # Where the sidebar stood when following stopped: mid-run (the step after analyze
    # may already have finished on a loaded machine, the last one not), and nothing
    # active, since the page follows no run.
    stopped_at = await sidebar(page)
    assert stopped_at in ("complete,pending,pending", "complete,complete,pending")
    await until_over(web_service, turn_id)
    # Nothing moved while the page was not following.
    assert await sidebar(page) == stopped_at
    await page.click("#check")
    await expect(page.locator("#chat-status")).to_have_text("done")
    await expect(page.locator("#chat-error")).to_be_empty()
    assert await sidebar(page) == "complete,complete,complete"
    async with AsyncTurnkeeperClient(ConnectionOptions(target=web_service.address)) as client:
        retained = await all_events(client, turn_id)
    assert (await reply_seqs(page))[turn_id] == [e.seq for e in retained]
    assert (await reply.locator(".text").inner_text()).startswith("Answer: ")
    await page.context.close()


async def test_regenerate_answers_the_last_question_again_in_a_new_run(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start()
    page = await open_page(browser, chat_url(web_service, "pipeline"))
    await ask(page, "What is a boundary?")
    await answered(page, 1)
    reply = page.locator(".message.agent")
    first_turn = await reply.get_attribute("data-turn-id")
    first_answer = await reply.locator(".text").inner_text()
    await page.click("#regenerate")
    await expect(reply).not_to_have_attribute("data-turn-id", first_turn or "")
    await expect(page.locator("#chat-status")).to_have_text("done")
    # The same question answered again by a new run, in place of the old answer.
    await expect(reply).to_have_count(1)
    await expect(reply.locator(".text")).to_have_text(first_answer)
    assert await sidebar(page) == "complete,complete,complete"
