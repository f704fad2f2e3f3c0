"""A turn failed at the re-drive cap says how many times it was re-driven, in the
contract's terms (the cap is 3 re-drives), and the same number everywhere: the
turn's error, its `turn.failed` event, the console and the CLI.

The turn is first re-driven once in a crash it shared with another turn, which
poison containment does not count against the cap: its attempts (4 at the end) are
not the number of re-drives the cap counts (3). A real service, real NATS, the
real CLI and the console in real Chromium.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
from grpc import aio
from playwright.async_api import Browser, expect
from turnkeeper.operator._cli import main
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.pages import open_page
from tests.support.service import ServiceFactory, unrenewed
from tests.support.turns import start

pytestmark = [pytest.mark.timeout(120)]

SAID = "re-driven 3 times"


@pytest.fixture
async def capped(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    # The default cap (3 re-drives); leases longer than the test, so only the test
    # re-drives.
    return await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        **unrenewed(claims=True),
    )


@pytest.fixture
async def stub(capped: TurnkeeperServer) -> AsyncIterator[turns_pb2_grpc.TurnServiceAsyncStub]:
    async with aio.insecure_channel(capped.address) as channel:
        yield turns_pb2_grpc.TurnServiceStub(channel)


async def up_to_the_cap(stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str) -> None:
    """`turn_id` RUNNING with the cap's 3 re-drives charged and one more that was not:
    its next charged re-drive fails it."""
    await start(stub, turn_id, f"th-{turn_id}", replica="r1", incarnation="i1")
    await start(stub, f"{turn_id}-peer", f"th-{turn_id}-peer", replica="r1", incarnation="i1")
    # Its replica restarts: a crash of a process running two turns, charged to neither.
    await stub.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    for _ in range(3):
        await stub.Redrive(pb.RedriveRequest(turn_id=turn_id, force=True))
    turn = (await stub.GetTurn(pb.GetTurnRequest(turn_id=turn_id))).turn
    assert (turn.state, turn.attempts, turn.crashes_charged) == (pb.TURN_STATE_RUNNING, 4, 3)


async def failed_event(
    stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str
) -> dict[str, object]:
    events = (await stub.ListEvents(pb.ListEventsRequest(turn_id=turn_id))).events
    assert events[-1].type == "turn.failed"
    data: dict[str, object] = json.loads(events[-1].data_json)
    return data


async def test_the_error_the_event_and_the_cli_say_the_same_number_of_re_drives(
    capped: TurnkeeperServer,
    stub: turns_pb2_grpc.TurnServiceAsyncStub,
    capsys: pytest.CaptureFixture[str],
) -> None:
    await up_to_the_cap(stub, "t-cli")
    capsys.readouterr()
    code = await asyncio.to_thread(
        main, ["turns", "redrive", "t-cli", "--force", "--address", capped.address]
    )
    out = capsys.readouterr().out
    assert code == 0
    turn = (await stub.GetTurn(pb.GetTurnRequest(turn_id="t-cli"))).turn
    assert turn.state == pb.TURN_STATE_FAILED
    assert SAID in turn.error and "re-drive cap is 3 re-drives" in turn.error, turn.error
    assert "4" not in turn.error
    event = await failed_event(stub, "t-cli")
    assert (event["error"], event["redrives"]) == (turn.error, 3)
    assert out.startswith("t-cli: FAILED at the re-drive cap after 3 re-drives"), out
    assert turn.error in out
    status = (await stub.TurnStatus(pb.TurnStatusRequest(turn_id="t-cli"))).error
    assert status == turn.error


@pytest.mark.browser
@pytest.mark.slow
async def test_the_console_says_the_same_number_of_re_drives(
    browser: Browser, capped: TurnkeeperServer, stub: turns_pb2_grpc.TurnServiceAsyncStub
) -> None:
    await up_to_the_cap(stub, "t-console")
    assert capped.web is not None
    page = await open_page(browser, capped.web.url + "console/turn.html?id=t-console")
    await expect(page.locator("#redrive")).to_be_visible()
    await page.click("#redrive")
    await expect(page.locator("#action-result")).to_have_text(
        "FAILED at the re-drive cap after 3 re-drives"
    )
    await expect(page.locator("#state")).to_have_text("FAILED")
    turn = (await stub.GetTurn(pb.GetTurnRequest(turn_id="t-console"))).turn
    await expect(page.locator("[data-fact=error]")).to_have_text(turn.error)
    assert SAID in turn.error
    last = page.locator('#timeline li[data-type="turn.failed"] pre')
    await expect(last).to_contain_text('"redrives":3')
    await page.context.close()
