"""The threadplane panel (examples/threadplane/panel: LangGraph's JS SDK, configured
with apiUrl and assistantId only) in real Chromium, against turnkeeper: the sidebar
moves through Analyze, Plan and Generate; the agent is SIGKILLed during Plan and the
run still finishes; no message is ever shown twice, on any DOM mutation; regenerate()
edits the thread with update_state(as_node=...) and answers again; an interrupt() is
answered from the page (Command(resume=...))."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from playwright.async_api import Browser, Page
from turnkeeper_server.app import TurnkeeperServer

from tests.support import bundled_pages
from tests.support.agents import PATIENCE, Agent
from tests.support.browser import browser
from tests.support.langgraph_host import hosts_for
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

__all__ = ["browser"]

# On one xdist worker: the module-scoped npm install is done once, not once per worker.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("threadplane-panel"),
]

PANEL = Path(__file__).resolve().parents[2] / "examples" / "threadplane" / "panel"
GRAPHS = Path(__file__).resolve().parent / "graphs" / "langgraph.json"

# Every mutation of the conversation is checked: a message id or text twice fails.
WATCH_DUPLICATES = """
window.__duplicates = [];
window.__mutations = 0;
new MutationObserver(() => {
  const list = document.getElementById("conversation");
  if (!list) return;
  window.__mutations += 1;
  const items = [...list.children];
  const ids = items.map((li) => li.dataset.id).filter(Boolean);
  const texts = items.map((li) => li.textContent);
  if (new Set(ids).size !== ids.length || new Set(texts).size !== texts.length) {
    window.__duplicates.push(texts);
  }
}).observe(document, { childList: true, subtree: true, characterData: true });
"""


@pytest.fixture(scope="module")
def panel_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The panel, installed from its lock file and bundled (esbuild)."""
    return bundled_pages.build(PANEL, tmp_path_factory.mktemp("threadplane") / "panel")


@pytest.fixture
async def panel_origin(panel_dir: Path) -> AsyncIterator[str]:
    """The panel on a static server of its own: another origin than the API's."""
    async with bundled_pages.static_origin(panel_dir) as origin:
        yield origin


@pytest.fixture
async def service(
    make_service: ServiceFactory, nats_server: NatsServer, panel_origin: str
) -> TurnkeeperServer:
    """The API, answering the panel's origin (CORS)."""
    return await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", http_cors_origins=(panel_origin,)
    )


async def open_panel(browser: Browser, origin: str, api_url: str, assistant: str) -> Page:
    page = await browser.new_page()
    page.on("console", lambda m: print(f"console {m.type}: {m.text}"))
    page.on("pageerror", lambda e: print(f"page error: {e}"))
    page.on("requestfailed", lambda r: print(f"request failed: {r.url} {r.failure}"))
    await page.add_init_script(WATCH_DUPLICATES)
    query = urlencode({"apiUrl": api_url, "assistantId": assistant})
    await page.goto(f"{origin}/index.html?{query}")
    return page


async def sidebar(page: Page) -> dict[str, str]:
    items: list[dict[str, str]] = await page.eval_on_selector_all(
        "#steps li",
        "els => els.map(e => ({step: e.dataset.step, state: e.className, label: e.textContent}))",
    )
    return {i["label"]: i["state"] for i in items}


async def test_the_panel_survives_a_sigkill_during_plan(
    browser: Browser,
    panel_origin: str,
    api_url: str,
    service: TurnkeeperServer,
    nats_server: NatsServer,
) -> None:
    async with hosts_for(GRAPHS, service, nats_server, replica="lg-panel", step_delay=1.0) as hosts:
        first = await hosts.start()
        page = await open_panel(browser, panel_origin, api_url, "durable-execution")
        assert await sidebar(page) == {
            "Analyze": "pending",
            "Plan": "pending",
            "Generate": "pending",
        }
        await page.fill("#question", "what survives a crash?")
        await page.click("#send")
        await page.wait_for_selector(
            '#steps li[data-step="analyze"].active', timeout=PATIENCE * 1000
        )
        await page.wait_for_selector('#steps li[data-step="plan"].active', timeout=PATIENCE * 1000)
        assert (await sidebar(page))["Analyze"] == "done"
        await first.kill()  # during Plan
        await hosts.start()
        await page.wait_for_selector(
            'body[data-running="false"] #conversation li.ai', timeout=PATIENCE * 1000
        )
        assert await sidebar(page) == {"Analyze": "done", "Plan": "done", "Generate": "done"}
        texts = await page.eval_on_selector_all(
            "#conversation li", "els => els.map(e => e.textContent)"
        )
        assert texts == [
            "what survives a crash?",
            "Here is the answer to 'what survives a crash?', planned and checked.",
        ]
        assert await page.evaluate("window.__mutations") > 0
        assert await page.evaluate("window.__duplicates") == []
        assert await page.is_hidden("#error")

        # regenerate(): update_state(as_node="plan") without the old answer, then a run.
        old = await page.get_attribute("#conversation li.ai", "data-id")
        await page.click("#regenerate")
        await page.wait_for_function(
            f"document.querySelector('#conversation li.ai')?.dataset.id !== {old!r} "
            "&& document.body.dataset.running === 'false'",
            timeout=PATIENCE * 1000,
        )
        texts = await page.eval_on_selector_all(
            "#conversation li", "els => els.map(e => e.textContent)"
        )
        assert len(texts) == 2 and texts[1].startswith("Here is the answer")
        assert await page.evaluate("window.__duplicates") == []


async def test_an_interrupt_is_answered_from_the_panel(
    browser: Browser, panel_origin: str, api_url: str, host: Agent
) -> None:
    page = await open_panel(browser, panel_origin, api_url, "approval")
    await page.fill("#question", "please draft")
    await page.click("#send")
    await page.wait_for_selector("#approval:not([hidden])", timeout=PATIENCE * 1000)
    assert "approve the draft?" in (await page.text_content("#approval-question") or "")
    await page.click("#approve")
    await page.wait_for_selector(
        'body[data-running="false"] #approval[hidden]', state="attached", timeout=PATIENCE * 1000
    )
    assert await page.is_hidden("#error")
    thread_id = await page.get_attribute("body", "data-thread")
    async with httpx.AsyncClient(base_url=api_url) as http:
        state = (await http.get(f"/threads/{thread_id}/state")).json()
    assert state["values"]["verdict"] == "approved" and state["next"] == []
