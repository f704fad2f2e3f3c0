"""The service restarted while a turn page streams: the page re-attaches by
Last-Event-ID and ends with every event once (no gap, no duplicate, no reset).

The service is a real subprocess, SIGKILLed and started again on the same ports.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpc import aio
from playwright.async_api import Browser, Request, expect
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

from tests.support.agents import shape
from tests.support.nats import NatsServer
from tests.support.pages import open_page, recorded, timeline
from tests.support.procs import OWN_CONNECTIONS, ServiceProcess
from tests.support.service import unrenewed_flags
from tests.support.turns import events, start

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

_CONSOLE = re.compile(r"turnkeeper console on (\S+)")


@pytest.fixture
def service(tmp_path: Path, nats_server: NatsServer) -> Iterator[ServiceProcess]:
    # The test writes the turn itself across the browser's waits and a restart: no
    # agent renews its lease.
    proc = ServiceProcess(
        tmp_path / "data", nats_url=nats_server.url, extra=["--http-port", "0", *unrenewed_flags()]
    )
    try:
        yield proc
    finally:
        proc.kill()


async def console_url(proc: ServiceProcess) -> str:
    """The console URL the service printed right after its listening line."""
    return (await asyncio.to_thread(proc.wait_line, _CONSOLE)).group(1)


async def test_service_restart_mid_stream_resumes_by_last_event_id(
    browser: Browser, service: ServiceProcess
) -> None:
    service.start()
    url = await console_url(service)
    port = url.rsplit(":", 1)[1].split("/")[0]
    # The restarted service serves HTTP on the same port, as a deployment would.
    service.extra = ["--http-port", port, *unrenewed_flags()]
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await start(stub, turn_id="t-rs", thread_id="th-rs")
        await stub.AppendEvents(
            turns_pb2.AppendEventsRequest(
                turn_id="t-rs", events=events(1, "token", "token", "step")
            )
        )

    page = await open_page(browser, url + "turn.html?id=t-rs")
    streams: list[Request] = []
    page.on("request", lambda r: streams.append(r) if "/events" in r.url else None)
    items = page.locator("#timeline li[data-seq]")
    await expect(items).to_have_count(3)

    service.kill()
    await expect(page.locator("#stream-status")).to_have_text("reconnecting")
    service.start()
    async with aio.insecure_channel(service.address, options=OWN_CONNECTIONS) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t-rs", events=events(4, "token", "step")),
            wait_for_ready=True,
        )
        await stub.FinishTurn(
            turns_pb2.FinishTurnRequest(
                turn_id="t-rs", outcome=turns_pb2.OUTCOME_DONE, events=events(6, "final")
            )
        )
        retained = await stub.ListEvents(turns_pb2.ListEventsRequest(turn_id="t-rs"))
    await expect(page.locator("#stream-status")).to_have_text("ended (DONE)")

    assert await timeline(page) == shape(list(retained.events))
    assert [seq for seq, _, _ in await timeline(page)] == list(range(1, 8))
    assert (await recorded(page))["duplicates"] == []
    assert await page.locator("#resets li").count() == 0
    # The stream that finished the page asked for what came after seq 3 of attempt 0.
    last = await streams[-1].all_headers()
    assert last["last-event-id"] == "3"
    assert streams[-1].url.endswith("/v1/turns/t-rs/events?attempt=0")
    await page.context.close()
