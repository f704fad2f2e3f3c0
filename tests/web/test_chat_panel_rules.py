"""The chat page follows the panel rules the Python and Node followers follow, shows
the contract's Pipeline sidebar, and leaves offering Retry to its banner: in headless
Chromium against a real service, real NATS and the pipeline agent as a subprocess.

- On every idle gap in the event stream the page asks TurnStatus: RUNNING keeps it
  waiting, a finished run concludes it even when no stream ever comes through (here:
  the stream quota is held, so every stream the page opens is refused with 429).
- An overall deadline, 15 minutes by default, ends the wait whatever the run does
  (the page's clock is Playwright's, run forward; the service's is real).
- The sidebar: Analyze, Plan, Generate, a spinner on the active entry, a check on
  completed ones, a circle on the rest, the line between entries done or pending.
- Retry after a run that ended CANCELLED re-submits the question as a new run.
- A pending approval and the progress shown stay when the stream breaks.
- The run's end stays shown when the answer to Approve comes after it (the resumed
  run can end, and its stream say so, before the relay's answer is in).
- A stream the service refuses ends the follow and the header says so, not "running".
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import AsyncIterator

import aiohttp
import pytest
from grpc import aio
from nats.aio.client import Client
from playwright.async_api import Browser, Page, Request, Response, expect
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.limits import DEFAULT_LIMITS

from tests.support.agents import until_event
from tests.support.nats import Collector, NatsServer
from tests.support.pages import PATIENCE_MS, open_context, open_page
from tests.support.relay import Relay
from tests.support.service import ServiceFactory
from tests.support.turns import start
from tests.web.test_chat_browser import (
    Pipelines,
    answered,
    ask,
    chat_url,
    graph_shown,
    pipelines,
    sidebar,
)

__all__ = ["pipelines"]  # the fixture, shared with test_chat_browser

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]

FIFTEEN_MINUTES_MS = 15 * 60 * 1000
ANY = re.compile(r".+")


async def markers(page: Page) -> tuple[list[str], list[str], list[str]]:
    """(labels, markers, lines) of the sidebar, top to bottom."""
    labels: list[str] = await page.eval_on_selector_all(
        "#pipeline li .label", "xs => xs.map(x => x.textContent)"
    )
    marks: list[str] = await page.eval_on_selector_all(
        "#pipeline li .marker", "xs => xs.map(x => x.dataset.marker)"
    )
    lines: list[str] = await page.eval_on_selector_all(
        "#pipeline li .line", "xs => xs.map(x => x.dataset.line)"
    )
    return labels, marks, lines


async def test_the_sidebar_shows_the_contracts_labels_markers_and_lines(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start(delay=1.0)
    page = await open_page(browser, chat_url(web_service, "pipeline"))
    labels = ["Analyze", "Plan", "Generate"]
    await expect(page.locator("#pipeline li")).to_have_count(3)
    assert await markers(page) == (labels, ["circle"] * 3, ["pending"] * 2)
    await expect(page.locator("#pipeline li").first).to_have_attribute("data-step", "analyze")
    await ask(page, "What does the sidebar show?")
    await expect(page.locator('#pipeline li[data-step="analyze"]')).to_have_attribute(
        "data-state", "active"
    )
    assert (await markers(page))[1][0] == "spinner"
    await expect(page.locator('#pipeline li[data-step="plan"]')).to_have_attribute(
        "data-state", "active"
    )
    assert await markers(page) == (labels, ["check", "spinner", "circle"], ["done", "pending"])
    await answered(page, 1)
    # Done: every step complete, no spinner left (the header says done too).
    assert await sidebar(page) == "complete,complete,complete"
    assert await markers(page) == (labels, ["check"] * 3, ["done", "done"])
    await page.context.close()


@pytest.fixture
async def one_stream_service(
    make_service: ServiceFactory, nats_server: NatsServer
) -> TurnkeeperServer:
    # One open stream per client: the test holds it, so the page's are refused (429).
    return await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        limits=dataclasses.replace(DEFAULT_LIMITS, max_watch_streams_per_client=1),
    )


@pytest.fixture
async def held_stream(one_stream_service: TurnkeeperServer) -> AsyncIterator[None]:
    """The one stream this address may open, on a turn of an agent nobody runs."""
    async with aio.insecure_channel(one_stream_service.address) as channel:
        await start(turns_pb2_grpc.TurnServiceStub(channel), "t-held", "th-held", "nobody")
    assert one_stream_service.web is not None
    url = f"{one_stream_service.web.url}v1/turns/t-held/events"
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200
        yield


@pytest.mark.usefixtures("held_stream")
async def test_an_idle_gap_asks_turn_status_and_a_finished_run_concludes_without_a_stream(
    browser: Browser,
    one_stream_service: TurnkeeperServer,
    nats_server: NatsServer,
    bus: tuple[Client, Collector],
) -> None:
    _, seen = bus
    agents = Pipelines(one_stream_service.address, nats_server.url)
    # Three steps of 2 s: the run is RUNNING for 6 s after the page has its id.
    agent = await agents.start(delay=2.0)
    try:
        # The page's clock is Playwright's: it runs, and the test brings each idle
        # gap forward instead of waiting it out (a gap is the default 5 s).
        context = await open_context(browser)
        page = await context.new_page()
        await page.clock.install()
        await page.goto(chat_url(one_stream_service, "pipeline"))
        idle_ms = await page.evaluate("TK.FOLLOW_DEFAULTS.idleMs")
        asked: list[Request] = []
        answered_running = asyncio.Event()
        answered_over = asyncio.Event()

        async def on_response(response: Response) -> None:
            request = response.request
            if request.url.endswith(".TurnService/TurnStatus"):
                asked.append(request)
                body = await response.json()
                if body.get("state") == "TURN_STATE_RUNNING":
                    answered_running.set()
                else:
                    answered_over.set()

        page.on("response", on_response)
        await ask(page, "Is anyone streaming?")
        reply = page.locator(".message.agent")
        await expect(reply).to_have_attribute("data-turn-id", ANY)
        turn_id = await reply.get_attribute("data-turn-id")
        assert turn_id is not None
        # An idle gap found the run RUNNING: the page keeps waiting.
        await page.clock.run_for(idle_ms)
        await asyncio.wait_for(answered_running.wait(), 60)
        await expect(page.locator("#chat-status")).not_to_have_text("done")
        await expect(page.locator("#submit")).to_be_disabled()
        # The run ends; no stream ever came through, the next idle gaps conclude it:
        # one finds it ended, the one after (the stream brought nothing) concludes.
        await until_event(seen, turn_id, "turn.done")
        await page.clock.run_for(idle_ms)
        await asyncio.wait_for(answered_over.wait(), 60)
        await page.clock.run_for(idle_ms)
        await expect(page.locator("#chat-status")).to_have_text("done")
        await expect(page.locator("#submit")).to_be_enabled()
        await expect(page.locator("#chat-error")).to_be_empty()
        assert len(asked) >= 2
        await context.close()
    finally:
        await agent.close()


async def test_the_follow_deadline_is_15_minutes_by_default(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    # Each step sleeps far longer than the test: the run stays RUNNING throughout.
    # Its stop at teardown need not wait for it (nothing is asserted after).
    await pipelines.start(delay=600.0, shutdown_grace=0.1)
    context = await open_context(browser)
    page = await context.new_page()
    await page.clock.install()
    await page.goto(chat_url(web_service, "pipeline"))
    assert await page.evaluate("TK.FOLLOW_DEFAULTS.deadlineMs") == FIFTEEN_MINUTES_MS
    await ask(page, "Will you wait for me?")
    await expect(page.locator(".message.agent")).to_have_attribute("data-turn-id", ANY)
    await expect(page.locator("#chat-status")).to_have_text("running")
    # A second short of 15 minutes on the page's clock: still waiting.
    await page.clock.run_for(FIFTEEN_MINUTES_MS - 1000)
    await expect(page.locator("#chat-status")).to_have_text("running")
    await expect(page.locator("#check")).to_be_hidden()
    # At 15 minutes the page gives up, whatever TurnStatus says, and says so.
    await page.clock.run_for(2000)
    await expect(page.locator("#chat-status")).to_have_text("no end in time")
    await expect(page.locator("#chat-error")).to_contain_text("15 minutes")
    await expect(page.locator("#check")).to_be_visible()
    await expect(page.locator("#retry")).to_be_hidden()
    await context.close()


async def test_retry_after_a_cancelled_run_resubmits_the_question_as_a_new_run(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start(delay=1.0)
    page = await open_page(browser, chat_url(web_service, "pipeline"))
    await ask(page, "Can I try again?")
    reply = page.locator(".message.agent")
    await expect(reply).to_have_attribute("data-turn-id", ANY)
    first = await reply.get_attribute("data-turn-id")
    assert first is not None
    async with aio.insecure_channel(web_service.address) as channel:
        await turns_pb2_grpc.TurnServiceStub(channel).CancelTurn(
            pb.CancelTurnRequest(turn_id=first, reason="an operator stopped it")
        )
    await expect(page.locator("#chat-status")).to_have_text("cancelled")
    await expect(page.locator("#chat-error")).to_have_text("the run ended cancelled")
    # The banner offers Retry for a run that ended so; Retry sends the question again.
    await expect(page.locator("#retry")).to_be_visible()
    await page.click("#retry")
    await answered(page, 1)
    await expect(reply).not_to_have_attribute("data-turn-id", first)
    await expect(page.locator("#chat-error")).to_be_empty()
    await expect(page.locator("#retry")).to_be_hidden()
    assert (await reply.locator(".text").inner_text()).startswith("Answer: ")
    await page.context.close()


async def test_a_pending_approval_and_the_progress_shown_stay_when_the_stream_breaks(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    # The pipeline parks for an approval of its plan before generate.
    await pipelines.start(approve=True)
    assert web_service.web is not None
    relay = Relay(web_service.web.port)
    await relay.start()
    try:
        page = await open_page(
            browser, f"http://127.0.0.1:{relay.port}/console/chat?agent=pipeline"
        )
        await graph_shown(page, 4)
        await ask(page, "May I see the plan first?")
        await expect(page.locator("#approval")).to_be_visible()
        await expect(page.locator("#approval-value")).to_contain_text('"approve"')
        await expect(page.locator("#chat-status")).to_have_text("parked")
        # Waiting at approve (plan's approval), generate still to run.
        assert await sidebar(page) == "complete,complete,active,pending"

        relay.shut()
        await expect(page.locator("#chat-error")).to_contain_text("interrupted")
        await expect(page.locator("#check")).to_be_visible()
        # What the page showed stays: the approval it waits for, and the progress.
        await expect(page.locator("#approval")).to_be_visible()
        assert await sidebar(page) == "complete,complete,active,pending"
        relay.open()
        await expect(page.locator("#chat-status")).to_have_text("parked")

        await page.click("#approve")
        await answered(page, 1)
        await expect(page.locator("#approval")).to_be_hidden()
        reply = page.locator(".message.agent .text")
        assert (await reply.inner_text()).startswith("Answer: ")
        assert await sidebar(page) == "complete,complete,complete,complete"
    finally:
        await relay.stop()
    await page.context.close()


# Holds, in the page, the answer to its `responses/resumeDetached` until the test
# releases it: the request goes out (and the run resumes) at once. `release()`
# resolves once the page has run everything the answer set off (the chain from the
# held fetch to Approve's handler is promise reactions only, all done before the next
# task).
HOLD_RESUME = """
(() => {
  const fetch = window.fetch.bind(window);
  let release;
  const released = new Promise((r) => { release = r; });
  window.__resume = {
    answered: false,
    release: () => { release(); return new Promise((r) => setTimeout(r, 0)); },
  };
  window.fetch = async (url, init) => {
    const response = await fetch(url, init);
    if (!String(url).endsWith("/rpc") || !String(init && init.body).includes("resumeDetached")) {
      return response;
    }
    const body = await response.json();
    window.__resume.answered = true;
    await released;
    return {ok: response.ok, status: response.status, json: async () => body};
  };
})();
"""


async def test_the_runs_end_stays_shown_when_the_answer_to_approve_comes_after_it(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start(approve=True)
    context = await open_context(browser)
    await context.add_init_script(HOLD_RESUME)
    page = await context.new_page()
    await page.goto(chat_url(web_service, "pipeline"))
    await graph_shown(page, 4)
    await ask(page, "Will the end stay?")
    await expect(page.locator("#chat-status")).to_have_text("parked")
    await page.click("#approve")
    # The run resumed and ended, and the stream said so, before the page had the answer.
    await page.wait_for_function("() => window.__resume.answered", timeout=PATIENCE_MS)
    await answered(page, 1)
    await page.evaluate("window.__resume.release()")
    # The answer (the run was resumed) is older news than the end: "done" stays.
    assert await page.inner_text("#chat-status") == "done"
    await expect(page.locator("#approval")).to_be_hidden()
    await expect(page.locator("#submit")).to_be_enabled()
    await expect(page.locator("#chat-error")).to_be_empty()
    assert (await page.inner_text(".message.agent .text")).startswith("Answer: ")
    assert await sidebar(page) == "complete,complete,complete,complete"
    await context.close()


async def test_a_refused_stream_leaves_the_header_saying_the_run_is_not_followed(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start()
    page = await open_page(browser, chat_url(web_service, "pipeline"))
    refusal = '{"code": "permission_denied", "message": "this token may not read the run"}'
    await page.route(
        "**/v1/turns/*/events",
        lambda route: route.fulfill(status=403, content_type="application/json", body=refusal),
    )
    await ask(page, "Who may read this?")
    await expect(page.locator("#chat-error")).to_have_text(
        "cannot follow the run: this token may not read the run"
    )
    await expect(page.locator("#chat-status")).to_have_text("cannot follow")
    await expect(page.locator("#submit")).to_be_enabled()
    await page.context.close()
