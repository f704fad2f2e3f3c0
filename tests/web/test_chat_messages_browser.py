"""The chat page with a messages graph (issue 49), in headless Chromium against
`turnkeeper dev`: the shape agent-chat-ui and useStream assume (`messages` in,
messages out, an interrupt answered with Command(resume=...)). A typed question, the
answer streamed, the interrupt approved, the graphs' process SIGKILLed mid-reply and
the answer shown once at the end; a failed run's error on the page (decision 324)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from tests.support.agents import PATIENCE, Agent
from tests.support.pages import PATIENCE_MS, open_page
from tests.support.procs import kill_group, spawn_child

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
PROJECT = Path(__file__).resolve().parent / "chat_project"
QUESTION = "is it durable?"
ANSWER = f"You asked {QUESTION!r}. A durable answer: this reply survives a crash."
HOSTED = "turnkeeper dev: graphs hosted by pid "


class Dev:
    def __init__(self, process: Agent) -> None:
        self.process = process

    async def console(self) -> str:
        line = await self.process.wait_line(
            lambda x: x.startswith("turnkeeper dev: console on "), PATIENCE * 4
        )
        await self.process.wait_line(lambda x: x.startswith("turnkeeper dev: ready"), PATIENCE * 4)
        return line.rsplit(" ", 1)[1]

    def graphs_pids(self) -> list[int]:
        return [int(x.rsplit(" ", 1)[1]) for x in self.process.lines if x.startswith(HOSTED)]


@pytest.fixture
async def dev(tmp_path: Path) -> AsyncIterator[Dev]:
    project = tmp_path / "project"
    shutil.copytree(PROJECT, project, ignore=shutil.ignore_patterns(".turnkeeper", "held-*"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "NATS_"))}
    env.update(PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO))
    child = await spawn_child(
        sys.executable,
        *("-m", "turnkeeper.operator", "dev", str(project / "langgraph.json")),
        *("--port", "0", "--no-reload"),
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    process = Agent(child, "dev")
    try:
        yield Dev(process)
    finally:
        kill_group(process.proc.pid)
        for pid in [int(x.rsplit(" ", 1)[1]) for x in process.lines if x.startswith(HOSTED)]:
            kill_group(pid)
        await process.close()
        print(f"--- turnkeeper dev ---\n{process.output()}")


async def ask(page: Page, question: str) -> None:
    await page.fill("#question", question)
    await page.click("#submit")


async def test_a_messages_graph_question_approval_and_a_kill_mid_reply(
    browser: Browser, dev: Dev
) -> None:
    console = await dev.console()
    page = await open_page(browser, console + "chat?agent=approve")
    # The page read the graph's input schema: a messages graph, its nodes in the sidebar.
    await expect(page.locator("body")).to_have_attribute("data-input", "messages")
    await expect(page.locator("#pipeline li")).to_have_count(3)
    await ask(page, QUESTION)

    # The interrupt: its value shown, the resume value proposed, approved.
    await expect(page.locator("#approval")).to_be_visible()
    await expect(page.locator("#approval-value")).to_contain_text("durable")
    assert json.loads(await page.input_value("#resume-value")) is True
    await page.click("#approve")

    # The reply streams (token events of `answer`: its step has not ended, the first
    # run waits after streaming), then the graphs' process is killed mid-reply.
    reply = page.locator(".message.agent .text")
    await expect(reply).to_have_text(ANSWER)
    await expect(page.locator("#chat-status")).to_have_text("running")
    answering = page.locator('#pipeline li[data-step="answer"]')
    await expect(answering).to_have_attribute("data-state", "active")
    first = dev.graphs_pids()[-1]
    os.kill(first, signal.SIGKILL)

    # dev starts the graphs again; the run is taken back from its checkpoint and ends:
    # a process start and a re-drive inside this one wait.
    await expect(page.locator("#chat-status")).to_have_text("done", timeout=2 * PATIENCE_MS)
    assert dev.graphs_pids()[-1] != first
    await expect(reply).to_have_count(1)
    await expect(reply).to_have_text(ANSWER)
    assert await page.locator(".message.user .text").all_inner_texts() == [QUESTION]
    await expect(page.locator("#chat-error")).to_have_text("")
    states = await page.eval_on_selector_all("#pipeline li", "xs => xs.map(x => x.dataset.state)")
    assert states == ["complete", "complete", "complete"]


async def test_a_failed_run_shows_its_error(browser: Browser, dev: Dev) -> None:
    """The graph raises: the page says why, with the service's error for the run, not
    only that it failed, and offers Retry."""
    console = await dev.console()
    page = await open_page(browser, console + "chat?agent=approve")
    await expect(page.locator("body")).to_have_attribute("data-input", "messages")
    await ask(page, "fail")
    # The run's end, given as long as the crash test's above.
    await expect(page.locator("#chat-status")).to_have_text("failed", timeout=2 * PATIENCE_MS)
    await expect(page.locator("#chat-error")).to_contain_text("the run failed: ")
    await expect(page.locator("#chat-error")).to_contain_text("asked to fail")
    await expect(page.locator("#retry")).to_be_visible()
