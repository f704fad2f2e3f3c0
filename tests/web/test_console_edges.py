"""The console's rough edges, in a real headless Chromium against a real service: the
turn page shows the turn's input; its rewinds and boundary agree even when the page
opened after the rewind; an unknown /console/ path is an HTML 404 page, not a file
to download; in the chat page, a run that ended leaves the sidebar and the header
saying the same, and the sidebar is the graph's nodes as its steps finish (no list
of the pipeline's steps in the page)."""

from __future__ import annotations

import json

import aiohttp
import pytest
from grpc import aio
from playwright.async_api import Browser, expect
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.pages import open_page
from tests.support.turns import events, start, value
from tests.web.test_chat_browser import Pipelines, answered, ask, chat_url, pipelines, sidebar

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.timeout(180),
    pytest.mark.unrenewed,
]
__all__ = ["pipelines"]


def console(service: TurnkeeperServer) -> str:
    assert service.web is not None
    return service.web.url + "console/"


async def test_the_turn_page_shows_the_turns_input(
    browser: Browser, web_service: TurnkeeperServer
) -> None:
    async with aio.insecure_channel(web_service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await start(stub, turn_id="t-input", input={"question": "what is a turn?"})
    page = await open_page(browser, console(web_service) + "turn.html?id=t-input")
    shown = page.locator('dd[data-fact="input"]')
    await expect(shown).to_have_text(
        json.dumps({"question": "what is a turn?"}, separators=(",", ":"))
    )
    await page.context.close()


async def test_the_turn_page_says_why_nobody_runs_a_turn_of_an_unannounced_agent(
    browser: Browser, web_service: TurnkeeperServer
) -> None:
    async with aio.insecure_channel(web_service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t-typo", thread_id="th-typo", agent="reserch", input=value({})
            )
        )
    page = await open_page(browser, console(web_service) + "turn.html?id=t-typo")
    await expect(page.locator('dd[data-fact="waiting"]')).to_contain_text(
        "no replica of agent 'reserch' has announced itself"
    )
    await page.context.close()


async def test_rewinds_and_boundary_agree_on_a_page_opened_after_the_rewind(
    browser: Browser, web_service: TurnkeeperServer
) -> None:
    async with aio.insecure_channel(web_service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        saver = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        await start(stub, turn_id="t-rw", thread_id="th1")
        await stub.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t-rw", events=events(1, "a", "b", "c"))
        )
        # The checkpoint that ends step 1: the boundary a re-drive rewinds to.
        await saver.PutCheckpoint(
            cpb.PutCheckpointRequest(
                thread_id="th1",
                checkpoint_id="c1",
                checkpoint=cpb.TypedValue(type="json", data=b"{}"),
                metadata_json=json.dumps({"step": 1}),
                fence=cpb.TurnFence(turn_id="t-rw", attempt=0),
            )
        )
        await stub.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t-rw", events=events(4, "d", "e"))
        )
        await stub.Redrive(turns_pb2.RedriveRequest(turn_id="t-rw", force=True))
        await stub.ClaimTurn(
            turns_pb2.ClaimTurnRequest(turn_id="t-rw", attempt=1, replica="r2", incarnation="i2")
        )
        await stub.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t-rw", attempt=1, events=events(4, "d"))
        )
        await stub.FinishTurn(
            turns_pb2.FinishTurnRequest(turn_id="t-rw", attempt=1, outcome=turns_pb2.OUTCOME_DONE)
        )
    page = await open_page(browser, console(web_service) + "turn.html?id=t-rw")
    await expect(page.locator('dd[data-fact="rewinds"]')).to_have_text("1")
    await expect(page.locator('dd[data-fact="boundary"]')).to_have_text("seq 3")
    await page.context.close()


async def test_an_unknown_console_path_is_an_html_404_page(web_service: TurnkeeperServer) -> None:
    async with aiohttp.ClientSession() as session:
        for path in ("nope", "turn", "chat/x", "nope.html"):
            async with session.get(console(web_service) + path) as response:
                assert response.status == 404, path
                assert response.content_type == "text/html", path
                page = await response.text()
                assert "<title>" in page and "/console/" in page
        # The pages themselves are still served, as HTML.
        async with session.get(console(web_service) + "turn.html") as response:
            assert response.status == 200 and response.content_type == "text/html"


async def test_after_a_run_ends_the_sidebar_and_the_header_agree(
    browser: Browser, web_service: TurnkeeperServer, pipelines: Pipelines
) -> None:
    await pipelines.start()
    page = await open_page(browser, chat_url(web_service, "pipeline"))
    # The sidebar is the agent's graph's nodes, asked of a replica (decision 219).
    await expect(page.locator("#pipeline li")).to_have_count(3)
    assert await sidebar(page) == "pending,pending,pending"
    await ask(page, "What is a turn?")
    await answered(page, 1)
    await expect(page.locator("#chat-status")).to_have_text("done")
    # The run is over: every step it ran is complete, none still active.
    assert await sidebar(page) == "complete,complete,complete"
    steps = await page.eval_on_selector_all(
        "#pipeline li", "items => items.map(li => li.dataset.step)"
    )
    assert steps == ["analyze", "plan", "generate"]
    await page.context.close()


async def test_the_chat_page_offers_the_agents_replicas_announced(
    browser: Browser, web_service: TurnkeeperServer
) -> None:
    async with aio.insecure_channel(web_service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        # What each replica does as it starts: its startup Redrive names its agent.
        for agent in ("writer", "researcher"):
            await stub.Redrive(
                turns_pb2.RedriveRequest(agent=agent, replica=f"{agent}-1", incarnation="i1")
            )
    agents_url = console(web_service).replace("console/", "v1/agents")
    async with aiohttp.ClientSession() as session, session.get(agents_url) as r:
        assert r.status == 200
        assert await r.json() == {"agents": ["researcher", "writer"]}
    assert web_service.web is not None
    page = await open_page(browser, web_service.web.url + "console/chat")
    await expect(page.locator("#agent")).to_have_value("researcher")
    options = await page.eval_on_selector_all("#agents option", "os => os.map(o => o.value)")
    assert options == ["researcher", "writer"]
    await page.context.close()
