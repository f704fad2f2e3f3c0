"""A service whose NATS is out of reach says so, with the URL and what to check
(issue 49: a wrong --nats-url was silent), and only once it has lasted: the first
dials of a start-up, or a bundled server's restart, say nothing."""

from __future__ import annotations

import logging
import time

import pytest
from turnkeeper_server.messaging.link import UNREACHABLE_GRACE, NatsLink

URL = "nats://127.0.0.1:1"


async def test_a_first_failed_dial_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    link = NatsLink(URL)
    with caplog.at_level(logging.WARNING, logger="turnkeeper_server.messaging.link"):
        link._say_unreachable()
    assert caplog.records == []


async def test_nats_out_of_reach_past_the_grace_names_the_url_and_the_flag(
    caplog: pytest.LogCaptureFixture,
) -> None:
    link = NatsLink(URL)
    link._down_since = time.monotonic() - UNREACHABLE_GRACE - 1
    with caplog.at_level(logging.WARNING, logger="turnkeeper_server.messaging.link"):
        link._say_unreachable()
        link._say_unreachable()  # within 30 s of the first: counted, not logged
    [record] = caplog.records
    assert URL in record.getMessage() and "--nats-url" in record.getMessage()
    assert "agents cannot be reached" in record.getMessage()
