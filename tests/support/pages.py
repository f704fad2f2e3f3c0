"""Opening the console's pages in Chromium, with a token and a DOM recorder.

The recorder is a MutationObserver installed before the page's own scripts run. It
replays every mutation record against a count of the seqs on the page
(`li[data-seq]` in `#timeline`), so a seq shown twice is caught at the moment it
happens, not only in the final DOM.
"""

from __future__ import annotations

import json
from typing import Any

from playwright.async_api import Browser, BrowserContext, Page

# The one give-up time of a browser test's waits (tests/support/browser.py).
from tests.support.browser import PATIENCE_MS

__all__ = ["PATIENCE_MS", "open_context", "open_page", "recorded", "reply_seqs", "timeline"]

RECORDER = """
(() => {
  window.__dom = {duplicates: [], maxShown: 0, sidebar: [], replySeqs: {}};
  const counts = new Map();
  function count(node, delta) {
    if (!(node instanceof Element)) return;
    const items = node.matches("li[data-seq]") ? [node] : [...node.querySelectorAll("li[data-seq]")];
    for (const li of items) {
      const seq = li.dataset.seq;
      const n = (counts.get(seq) || 0) + delta;
      counts.set(seq, n);
      if (n > 1) window.__dom.duplicates.push(seq);
    }
  }
  document.addEventListener("DOMContentLoaded", () => {
    const timeline = document.getElementById("timeline");
    if (timeline) {
      new MutationObserver((records) => {
        for (const r of records) {
          r.removedNodes.forEach((n) => count(n, -1));
          r.addedNodes.forEach((n) => count(n, +1));
        }
        window.__dom.maxShown = Math.max(window.__dom.maxShown, timeline.children.length);
      }).observe(timeline, {childList: true});
    }
    const pipeline = document.getElementById("pipeline");
    if (pipeline) {
      // Each render replaces the items: the state is read from the nodes each record
      // added, so renders batched into one observer callback are all seen.
      new MutationObserver((records) => {
        for (const r of records) {
          const items = [...r.addedNodes].filter((n) => n instanceof Element && n.matches("li"));
          const s = items.map((li) => li.dataset.state).join(",");
          const seen = window.__dom.sidebar;
          if (s && seen[seen.length - 1] !== s) seen.push(s);
        }
      }).observe(pipeline, {childList: true});
    }
    const messages = document.getElementById("messages");
    if (messages) {
      // Every value a reply's data-last-seq held, in order: each record's old value;
      // pages.reply_seqs adds the current one.
      new MutationObserver((records) => {
        for (const r of records) {
          const turn = r.target.dataset.turnId || "?";
          const seqs = window.__dom.replySeqs[turn] || (window.__dom.replySeqs[turn] = []);
          if (r.oldValue !== null) seqs.push(Number(r.oldValue));
        }
      }).observe(messages, {subtree: true, attributes: true, attributeOldValue: true,
        attributeFilter: ["data-last-seq"]});
    }
  });
})();
"""


async def open_context(browser: Browser, token: str | None = None) -> BrowserContext:
    context = await browser.new_context(viewport={"width": 1200, "height": 800})
    if token is not None:
        await context.add_init_script(
            f"sessionStorage.setItem('turnkeeper.token', {json.dumps(token)});"
        )
    await context.add_init_script(RECORDER)
    context.set_default_timeout(PATIENCE_MS)
    return context


async def open_page(browser: Browser, url: str, token: str | None = None) -> Page:
    context = await open_context(browser, token)
    page = await context.new_page()
    await page.goto(url)
    return page


async def timeline(page: Page) -> list[tuple[int, str, Any]]:
    """(seq, type, data) of each event the turn page shows."""
    rows = await page.eval_on_selector_all(
        "#timeline li[data-seq]",
        "items => items.map(li => [li.dataset.seq, li.dataset.type, li.querySelector('pre').textContent])",
    )
    return [(int(seq), type_, json.loads(data)) for seq, type_, data in rows]


async def recorded(page: Page) -> dict[str, Any]:
    result: dict[str, Any] = await page.evaluate("window.__dom")
    return result


async def reply_seqs(page: Page) -> dict[str, list[int]]:
    """Per run (turn id), every seq its reply applied, in order."""
    seqs: dict[str, list[int]] = (await recorded(page))["replySeqs"]
    finals: list[list[str]] = await page.eval_on_selector_all(
        ".message.agent[data-last-seq]",
        "items => items.map(m => [m.dataset.turnId, m.dataset.lastSeq])",
    )
    for turn, last in finals:
        seqs.setdefault(turn, []).append(int(last))
    return seqs
