"""The panel's overall deadline is 15 minutes by default in all three panels: the
Python follower, the Node follower and the browser's chat page. Each default is read
where the panel takes it from when no deadline is given: FollowOptions' field, the
Node package's FOLLOW_DEFAULTS (the built package, as a user imports it; followTurn's
parameter defaults are those), and the page's TK.FOLLOW_DEFAULTS in real Chromium
(tests/web/test_chat_panel_rules.py also runs the page's clock to the deadline).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from playwright.async_api import Browser
from turnkeeper.panel.follower import FollowOptions
from turnkeeper_server.app import TurnkeeperServer

from tests.support.browser import browser
from tests.support.node import NODE
from tests.support.service import ServiceFactory

# The one Chromium fixture (a missing browser fails under TURNKEEPER_REQUIRE_BROWSER).
__all__ = ["browser"]

FIFTEEN_MINUTES = 15 * 60


def test_the_python_followers_default_deadline_is_15_minutes() -> None:
    assert FollowOptions().deadline == FIFTEEN_MINUTES


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_node_followers_default_deadline_is_15_minutes(built_node_package: Path) -> None:
    package = built_node_package
    assert NODE is not None
    script = (
        'import("./dist/index.js").then((m) => '
        "console.log(JSON.stringify({defaults: m.FOLLOW_DEFAULTS, "
        "source: m.followTurn.toString()})))"
    )
    out = subprocess.run(
        [NODE, "-e", script], cwd=package, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    found = json.loads(out)
    assert found["defaults"]["deadlineMs"] == FIFTEEN_MINUTES * 1000
    # followTurn takes its default from there.
    assert "deadlineMs = FOLLOW_DEFAULTS.deadlineMs" in found["source"]


@pytest.mark.browser
@pytest.mark.slow
async def test_the_browser_panels_default_deadline_is_15_minutes(
    make_service: ServiceFactory, browser: Browser
) -> None:
    service: TurnkeeperServer = await make_service(http_listen="127.0.0.1:0")
    assert service.web is not None
    page = await browser.new_page()
    await page.goto(f"{service.web.url}console/chat?agent=pipeline")
    deadline = await page.evaluate("TK.FOLLOW_DEFAULTS.deadlineMs")
    assert deadline == FIFTEEN_MINUTES * 1000
