"""The console's store page in a real headless Chromium: every namespace with its
item count, a namespace's items once picked; with tokens, a panel's token is told
the page needs an operator's, and an operator's reads the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, expect
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.pages import open_page
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(120)]


async def _fill(service: TurnkeeperServer) -> None:
    store = service.engine.store
    await store.put(("users", "alice"), "m1", {"text": "likes tea"})
    await store.put(("users", "alice"), "m2", {"text": "has a cat"})
    await store.put(("users", "alice", "prefs"), "theme", {"text": "dark"})
    await store.put(("docs",), "d1", {"text": "a document"})


async def test_the_store_page_counts_each_namespace_and_shows_its_items(
    browser: Browser, web_service: TurnkeeperServer
) -> None:
    await _fill(web_service)
    assert web_service.web is not None
    page = await open_page(browser, web_service.web.url + "console/store")
    alice = page.locator('tr[data-namespace="users.alice"]')
    # Its own two items, not the one of ("users", "alice", "prefs") under it.
    await expect(alice.locator("td").nth(1)).to_have_text("2")
    await expect(page.locator('tr[data-namespace="users.alice.prefs"] td').nth(1)).to_have_text("1")
    await expect(page.locator('tr[data-namespace="docs"] td').nth(1)).to_have_text("1")
    await alice.locator("a").click()
    await expect(page.locator("#items tr[data-key]")).to_have_count(2)
    await expect(page.locator('#items tr[data-key="m1"]')).to_contain_text("likes tea")
    await page.context.close()


async def test_with_tokens_the_store_page_needs_an_operators(
    browser: Browser, make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl", {"panel": "panel", "operator": "operator"})
    service = await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        tokens_file=tmp_path / "tokens.jsonl",
    )
    await _fill(service)
    assert service.web is not None
    url = service.web.url + "console/store"
    panel = await open_page(browser, url, tokens["panel"])
    await expect(panel.locator("#store-error")).to_contain_text("needs an operator's token")
    await panel.context.close()
    operator = await open_page(browser, url, tokens["operator"])
    await expect(operator.locator('tr[data-namespace="docs"] td').nth(1)).to_have_text("1")
    await operator.context.close()
