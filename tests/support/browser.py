"""A real headless Chromium (Debian's `chromium`) driven by Playwright, for every
browser test. Without a Chromium the tests skip, saying so; with
TURNKEEPER_REQUIRE_BROWSER=1 (CI sets it after installing chromium) that skip is a
failure instead."""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, async_playwright, expect

# How long a browser test waits for what it expects (text appearing, an attribute
# changing, an element to click) before it gives up: the one give-up time of every
# wait, Playwright's `expect` (set here, where every browser test's fixture comes
# from) and each context's actions (tests/support/pages.py's open_context). The waits
# are on events; this is only how long a loaded machine (CI, the suite on 2 cores) may
# take to show one. Nothing waits this long when things work.
PATIENCE_MS = 60_000
expect.set_options(timeout=PATIENCE_MS)

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_path() -> str | None:
    """TURNKEEPER_CHROMIUM, else Debian's chromium on PATH or at /usr/bin/chromium."""
    given = os.environ.get("TURNKEEPER_CHROMIUM")
    if given:
        return given if os.path.exists(given) else None
    found = shutil.which("chromium")
    if found:
        return found
    return "/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    path = chromium_path()
    if path is None:
        reason = "no Chromium: install Debian's chromium (apt-get install chromium)"
        if os.environ.get("TURNKEEPER_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TURNKEEPER_REQUIRE_BROWSER=1 but {reason}")
        pytest.skip(reason=reason)
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()
