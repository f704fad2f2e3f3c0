"""Fixtures for the HTTP side: a service with its HTTP port, an HTTP client, and a
real headless Chromium (tests/support/browser.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from turnkeeper_server.app import TurnkeeperServer

from tests.support.browser import browser
from tests.support.http import Http
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

# The one Chromium fixture, shared with tests/langgraph_api/.
__all__ = ["browser"]


@pytest.fixture
async def web_service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")


@pytest.fixture
async def http(web_service: TurnkeeperServer) -> AsyncIterator[Http]:
    assert web_service.web is not None
    async with aiohttp.ClientSession() as session:
        yield Http(session, web_service.web.url)
