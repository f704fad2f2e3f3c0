"""The console in a real headless Chromium against a real service, NATS and agents.

Pages are driven as a person uses them; what they show is read from the DOM, and a
MutationObserver (pages.RECORDER) checks every change for a seq shown twice.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from grpc import aio
from nats.aio.client import Client
from playwright.async_api import Browser, Page, expect
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.journal import runs as journal_runs
from turnkeeper_server.journal.runs import RunRecord

from tests.support.agents import Agents, agents_for, all_events, result, shape
from tests.support.nats import Collector, NatsServer
from tests.support.pages import open_page, recorded, timeline
from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory, unrenewed
from tests.support.turns import events, start, value

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(180)]

JOB = {"job": "report", "results": []}


def console(service: TurnkeeperServer) -> str:
    assert service.web is not None
    return service.web.url + "console/"


# The test writes the turn itself, between the browser's waits: no agent renews it.
@pytest.mark.unrenewed
async def test_turns_list_shows_a_new_turn_and_its_state_changes_without_a_reload(
    browser: Browser, web_service: TurnkeeperServer
) -> None:
    page = await open_page(browser, console(web_service))
    await page.evaluate("window.__notReloaded = true")
    async with aio.insecure_channel(web_service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        row = page.locator('tr[data-turn-id="t-live"]')
        await expect(row).to_have_count(0)
        await start(stub, turn_id="t-live", thread_id="th-live", agent="writer")
        await expect(row).to_have_attribute("data-state", "RUNNING")
        await stub.AppendEvents(
            turns_pb2.AppendEventsRequest(turn_id="t-live", events=events(1, "token"))
        )
        await stub.ParkTurn(
            turns_pb2.ParkTurnRequest(turn_id="t-live", interrupt=value({"question": "ok?"}))
        )
        await expect(row).to_have_attribute("data-state", "PARKED")
        # Filters: another agent's name hides it; its own shows it again.
        await page.fill("#f-agent", "someone-else")
        await expect(row).to_have_count(0)
        await page.fill("#f-agent", "writer")
        await page.select_option("#f-state", "TURN_STATE_PARKED")
        await expect(row).to_have_count(1)
        await page.select_option("#f-state", "TURN_STATE_DONE")
        await expect(row).to_have_count(0)
    assert await page.evaluate("window.__notReloaded") is True
    await page.context.close()


@pytest.fixture
async def agents(
    web_service: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agents]:
    async with agents_for(web_service.address, nats_server.url, tmp_path / "side.log") as spawned:
        yield spawned


async def ended(page: Page) -> None:
    await expect(page.locator("#stream-status")).to_have_text("ended (DONE)")


async def test_agent_killed_mid_turn_page_shows_one_reset_and_the_uninterrupted_transcript(
    browser: Browser,
    web_service: TurnkeeperServer,
    agents: Agents,
    bus: tuple[Client, Collector],
) -> None:
    nc, seen = bus
    first = await agents.start(slow_step=2)
    second = await agents.spawn(warm=True)
    await result(
        nc,
        "responses/create",
        {"input": JOB, "turn_id": "t-crash", "thread_id": "th-crash", "background": True},
    )
    page = await open_page(browser, console(web_service) + "turn.html?id=t-crash")
    # Step 2 has streamed its reply, and the page shows it; then the agent dies.
    await expect(
        page.locator('#timeline li[data-type="token"]').filter(has_text='"step2"').first
    ).to_be_visible()
    await first.kill()
    await second.go()
    await ended(page)

    shown = await timeline(page)
    dom = await recorded(page)
    assert dom["duplicates"] == [], f"a seq was shown twice: {dom['duplicates']}"
    assert await page.locator("#resets li").count() == 1
    async with AsyncTurnkeeperClient(ConnectionOptions(target=web_service.address)) as client:
        retained = shape(await all_events(client, "t-crash"))
        boundary = int(await page.locator("#resets li").get_attribute("data-boundary") or -1)
        step1 = next(s for s, t, d in retained if t == "step" and d["node"] == "step1")
        assert boundary == step1

        # The service published exactly one rewind, to that boundary.
        def rewinds() -> list[dict[str, Any]]:
            return [m for m in seen.on(".turn.rewind") if m["turn_id"] == "t-crash"]

        await seen.wait_for(lambda: bool(rewinds()), timeout=30)
        assert [(r["seq"], r["attempt"]) for r in rewinds()] == [(boundary, 1)]
        assert shown == retained
        # An uninterrupted run of the same job, on its own page: the same transcript.
        await result(
            nc,
            "responses/create",
            {"input": JOB, "turn_id": "t-ref", "thread_id": "th-ref", "background": True},
        )
        reference = await open_page(browser, console(web_service) + "turn.html?id=t-ref")
        await ended(reference)
        assert await timeline(reference) == shown
        assert (await recorded(reference))["duplicates"] == []
        assert await reference.locator("#resets li").count() == 0
    # The page had shown more of the first attempt than survived the rewind.
    assert dom["maxShown"] >= boundary + 1


async def test_resume_a_parked_turn_with_an_operator_token_and_not_with_a_panel_token(
    browser: Browser, make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl")
    service = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", tokens_file=tmp_path / "tokens.jsonl"
    )
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t-park",
                thread_id="th-park",
                agent="alpha",
                input=value({"job": "deploy"}),
                replica="r1",
                incarnation="i1",
            ),
            metadata=bearer(tokens["alpha"]),
        )
        await stub.ParkTurn(
            turns_pb2.ParkTurnRequest(
                turn_id="t-park",
                interrupt=value({"question": "deploy to production?"}),
                events=events(1, "interrupt"),
            ),
            metadata=bearer(tokens["alpha"]),
        )
        url = console(service) + "turn.html?id=t-park"

        # A panel reads and answers the turns of its own threads only (decisions
        # 309, 311): agent alpha's turn is not there for it, and its answer is
        # refused by the service.
        panel = await open_page(browser, url, tokens["panel"])
        await expect(panel.locator("main")).to_contain_text("turn 't-park' is not in the journal")
        await expect(panel.locator("#parked")).to_be_hidden()
        with pytest.raises(aio.AioRpcError) as refused:
            await stub.ResumeDetached(
                turns_pb2.ResumeDetachedRequest(turn_id="t-park", resume=value(True)),
                metadata=bearer(tokens["panel"]),
            )
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "may not answer the interrupt of turn 't-park'" in str(refused.value.details())
        state = await stub.TurnStatus(
            turns_pb2.TurnStatusRequest(turn_id="t-park"), metadata=bearer(tokens["admin"])
        )
        assert state.state == turns_pb2.TURN_STATE_PARKED

        operator = await open_page(browser, url, tokens["operator"])
        await operator.fill("#resume-value", "not json")
        await operator.click("#resume")
        await expect(operator.locator("#resume-result")).to_contain_text("not JSON")
        await operator.fill("#resume-value", '{"approved": true}')
        await operator.click("#resume")
        await expect(operator.locator("#resume-result")).to_contain_text("resumed (RUNNING")
        await expect(operator.locator("#state")).to_have_text("RUNNING")
        await expect(operator.locator("#parked")).to_be_hidden()
        got = await stub.GetTurn(
            turns_pb2.GetTurnRequest(turn_id="t-park"), metadata=bearer(tokens["admin"])
        )
        assert got.turn.has_resume
        assert json_format.MessageToDict(got.turn.resume) == {"approved": True}


async def test_redrive_is_offered_to_operators_only_and_the_service_has_the_last_word(
    browser: Browser, make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl")
    service = await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        tokens_file=tmp_path / "tokens.jsonl",
        **unrenewed(),
    )
    # The panel's thread: a panel reads the turns of its own threads (decision 311).
    await service.engine.threads.ensure("th-ll", {}, "panel:panel")
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t-live-lease",
                thread_id="th-ll",
                agent="alpha",
                input=value({}),
                replica="r1",
                incarnation="i1",
            ),
            metadata=bearer(tokens["alpha"]),
        )
    url = console(service) + "turn.html?id=t-live-lease"
    panel = await open_page(browser, url, tokens["panel"])
    await expect(panel.locator("#state")).to_have_text("RUNNING")
    await expect(panel.locator("#redrive")).to_be_hidden()
    operator = await open_page(browser, url, tokens["operator"])
    await expect(operator.locator("#redrive")).to_be_visible()
    await expect(operator.locator("[data-fact=owner]")).to_have_text("r1 / i1")
    # Its owner holds a live lease: the service refuses, and the page says why.
    await operator.click("#redrive")
    result_text = operator.locator("#action-result")
    await expect(result_text).to_contain_text("refused (failed_precondition)")
    await expect(result_text).to_contain_text("lease")


async def test_an_operator_cancels_a_parked_turn_and_a_panel_token_is_refused(
    browser: Browser, make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    tokens = write_tokens(tmp_path / "tokens.jsonl")
    service = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", tokens_file=tmp_path / "tokens.jsonl"
    )
    # The panel's thread: a panel reads the turns of its own threads (decision 311).
    await service.engine.threads.ensure("th-stop", {}, "panel:panel")
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t-stop", thread_id="th-stop", agent="alpha", input=value({})
            ),
            metadata=bearer(tokens["alpha"]),
        )
        await stub.ParkTurn(
            turns_pb2.ParkTurnRequest(
                turn_id="t-stop", interrupt=value({"q": "go?"}), events=events(1, "interrupt")
            ),
            metadata=bearer(tokens["alpha"]),
        )
    url = console(service) + "turn.html?id=t-stop"
    panel = await open_page(browser, url, tokens["panel"])
    await expect(panel.locator("#state")).to_have_text("PARKED")
    await expect(panel.locator("#cancel")).to_be_hidden()

    operator = await open_page(browser, url, tokens["operator"])
    await expect(operator.locator("#state")).to_have_text("PARKED")
    await expect(operator.locator("#cancel")).to_be_visible()
    # The token changes under the open page: the service refuses, and the page says why.
    await operator.evaluate("t => sessionStorage.setItem('turnkeeper.token', t)", tokens["panel"])
    await operator.click("#cancel")
    result_text = operator.locator("#action-result")
    await expect(result_text).to_contain_text("refused (permission_denied)")
    await expect(result_text).to_contain_text("may not call CancelTurn")
    await expect(operator.locator("#state")).to_have_text("PARKED")

    await operator.evaluate(
        "t => sessionStorage.setItem('turnkeeper.token', t)", tokens["operator"]
    )
    await operator.click("#cancel")
    await expect(result_text).to_contain_text("cancelled (CANCELLED)")
    await expect(operator.locator("#state")).to_have_text("CANCELLED")
    await expect(operator.locator("#cancel")).to_be_hidden()
    await expect(operator.locator('#timeline li[data-type="turn.cancelled"]')).to_have_count(1)


@pytest.mark.unrenewed
async def test_the_turn_page_lists_the_effect_ledger_and_follows_a_supersede(
    browser: Browser, web_service: TurnkeeperServer
) -> None:
    async with aio.insecure_channel(web_service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        await start(stub, turn_id="t-fx", thread_id="th-fx", agent="writer")
        for key, order in (("k1", 1), ("k2", 2)):
            call = turns_pb2.EffectCall(
                turn_id="t-fx",
                key=key,
                name="charge",
                args_json=json.dumps({"order": order}),
                policy=turns_pb2.EFFECT_POLICY_RETRY,
                task_id="task-1",
            )
            await stub.RecordEffect(
                turns_pb2.RecordEffectRequest(
                    call=call, state=turns_pb2.EFFECT_STATE_DONE, outcome_json=f'"ch-{order}"'
                )
            )
        page = await open_page(browser, console(web_service) + "turn.html?id=t-fx")
        rows = page.locator("#effects tbody tr")
        await expect(rows).to_have_count(2)
        await expect(page.locator('tr[data-key="k2"]')).to_have_attribute("data-state", "DONE")
        assert (await page.locator('tr[data-key="k1"]').inner_text()).split() == [
            "k1",
            "charge",
            "DONE",
            "retry",
            "0",
            '{"order":1}',
            '"ch-1"',
        ]
        # The task's writes say only k1 was made; the next checkpoint announces k2.
        fence = checkpoints_pb2.TurnFence(turn_id="t-fx", attempt=0)
        await checkpoints.PutWrites(
            checkpoints_pb2.PutWritesRequest(
                thread_id="th-fx",
                checkpoint_id="cp-0",
                task_id="task-1",
                writes=[
                    checkpoints_pb2.WriteInput(
                        idx=0, channel="out", value=checkpoints_pb2.TypedValue(type="json")
                    )
                ],
                fence=fence,
                settle_effects=True,
                effect_keys=["k1"],
            )
        )
        await checkpoints.PutCheckpoint(
            checkpoints_pb2.PutCheckpointRequest(
                thread_id="th-fx",
                checkpoint_id="cp-1",
                checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
                metadata_json="{}",
                fence=fence,
            )
        )
        superseded = page.locator('tr[data-key="k2"]')
        await expect(superseded).to_have_attribute("data-state", "SUPERSEDED")
        await expect(superseded).to_contain_text("not made again")
        await expect(page.locator('li[data-type="effect.superseded"]')).to_have_count(1)
    await page.context.close()


async def test_the_turn_page_shows_a_runs_webhook_attempts(
    browser: Browser, web_service: TurnkeeperServer
) -> None:
    # A run with a webhook, ended; this service has no signing secret, so its
    # attempt fails and is retried later: the page shows the attempt and why.
    async with aio.insecure_channel(web_service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await start(stub, turn_id="t-hook", thread_id="th-hook", agent="writer")
        record = RunRecord("t-hook", {}, {"webhook": "https://hooks.example.com/runs"})
        await web_service.db.write(lambda tx: journal_runs.put(tx, record))
        await stub.FinishTurn(
            turns_pb2.FinishTurnRequest(turn_id="t-hook", attempt=0, outcome=turns_pb2.OUTCOME_DONE)
        )
    # The page follows the delivery while it is due: the attempt shows when made.
    page = await open_page(browser, console(web_service) + "turn.html?id=t-hook")
    row = page.locator('#webhook-attempts tr[data-attempt="1"]')
    await expect(row).to_have_attribute("data-outcome", "retry")
    await expect(row).to_contain_text("no webhook secret")
    await expect(page.locator("#webhook-note")).to_contain_text(
        "https://hooks.example.com/runs: pending"
    )
