"""A chat page on LangGraph's useStream (React; use_stream_page/, unchanged SDK) in
real Chromium, against turnkeeper: the model's reply appears word by word; the agent
is SIGKILLed mid-reply and the partial reply vanishes from the page before the new
one streams in; the page ends with the thread's conversation, and no message is
ever shown twice, on any DOM mutation (a MutationObserver)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from langgraph_sdk import get_client
from playwright.async_api import Browser
from turnkeeper_server.app import TurnkeeperServer

from tests.langgraph_api.test_sdk_live_tokens import CHAT, REPLY, WORDS, Gate, gate
from tests.support import bundled_pages
from tests.support.agents import PATIENCE
from tests.support.browser import browser
from tests.support.langgraph_host import hosts_for
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

__all__ = ["browser", "gate"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("use-stream-page"),
]

PAGE = Path(__file__).resolve().parent / "use_stream_page"

# Every mutation of the conversation is recorded: what it shows, and any message
# id or text shown twice.
WATCH = """
window.__shown = [];
window.__duplicates = [];
new MutationObserver(() => {
  const list = document.getElementById("conversation");
  if (!list) return;
  const items = [...list.children].map((li) => [li.dataset.id, li.textContent]);
  const ids = items.map(([id]) => id);
  const texts = items.map(([, text]) => text);
  if (new Set(ids).size !== ids.length || new Set(texts).size !== texts.length) {
    window.__duplicates.push(items);
  }
  window.__shown.push(items);
}).observe(document, { childList: true, subtree: true, characterData: true });
"""


@pytest.fixture(scope="module")
def page_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page, installed from its lock file and bundled (esbuild)."""
    return bundled_pages.build(PAGE, tmp_path_factory.mktemp("use-stream") / "page")


@pytest.fixture
async def page_origin(page_dir: Path) -> AsyncIterator[str]:
    async with bundled_pages.static_origin(page_dir) as origin:
        yield origin


@pytest.fixture
async def service(
    make_service: ServiceFactory, nats_server: NatsServer, page_origin: str
) -> TurnkeeperServer:
    """The API, answering the page's origin (CORS)."""
    return await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", http_cors_origins=(page_origin,)
    )


async def test_the_partial_reply_vanishes_and_the_new_one_streams(
    browser: Browser,
    page_origin: str,
    service: TurnkeeperServer,
    nats_server: NatsServer,
    gate: tuple[Gate, str],
) -> None:
    g, address = gate
    assert service.web is not None
    api_url = service.web.url.rstrip("/")
    async with hosts_for(
        CHAT, service, nats_server, replica="lg-chat", extra_env={"CHAT_GATE": address}
    ) as hosts:
        first = await hosts.start()
        page = await browser.new_page()
        page.on("pageerror", lambda e: print(f"page error: {e}"))
        await page.add_init_script(WATCH)
        await page.goto(f"{page_origin}/index.html?{urlencode({'apiUrl': api_url})}")
        await page.wait_for_function("typeof window.__send === 'function'")
        # Not awaited in the page: submit() resolves when the run ends.
        await page.evaluate("() => { window.__send('count'); }")
        reply = await g.next_reply()
        await g.release(reply, 2)
        partial = await page.wait_for_selector(
            "#conversation li.ai:text-is('one two three')", timeout=PATIENCE * 1000
        )
        assert partial is not None
        partial_id = await partial.get_attribute("data-id")
        await first.kill()
        await hosts.start()
        await g.release(await g.next_reply(), WORDS - 1)
        await page.wait_for_selector(
            "main[data-loading='false'] #conversation li:text-is('noted 2 messages')",
            timeout=PATIENCE * 1000,
        )
        shown: list[list[Any]] = await page.evaluate("window.__shown")
        assert await page.evaluate("window.__duplicates") == []
        with_partial = [k for k, items in enumerate(shown) if partial_id in {i for i, _ in items}]
        # The partial reply vanished before the new reply began.
        assert shown[with_partial[-1] + 1] == [["q-1", "count"]], shown[with_partial[-1] + 1]
        texts = await page.eval_on_selector_all(
            "#conversation li", "els => els.map(e => [e.dataset.id, e.textContent])"
        )
        client = get_client(url=api_url)
        try:
            [thread] = await client.threads.search()
            state: Any = await client.threads.get_state(thread["thread_id"])
        finally:
            await client.http.client.aclose()
        assert texts == [[m["id"], m["content"]] for m in state["values"]["messages"]]
        assert [t for _, t in texts] == ["count", REPLY, "noted 2 messages"]


async def test_a_page_may_ask_for_the_settled_stream(
    page_origin: str, service: TurnkeeperServer
) -> None:
    """X-Turnkeeper-Stream passes a CORS preflight from the page's origin."""
    assert service.web is not None
    async with httpx.AsyncClient(base_url=service.web.url.rstrip("/")) as http:
        answer = await http.options(
            "/threads/any/runs/stream",
            headers={
                "Origin": page_origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-turnkeeper-stream",
            },
        )
    assert answer.status_code in (200, 204)
    allowed = answer.headers["Access-Control-Allow-Headers"].lower()
    assert "x-turnkeeper-stream" in allowed
