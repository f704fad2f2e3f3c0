"""Regenerates the screenshots in docs/console.md from a real service and Chromium.

    python scripts/console_screenshots.py            # from the repository root

It starts a bundled nats-server, the service with its HTTP side, and the pipeline
agent (tests/agents/pipeline_agent.py), journals a few turns the way an executor does
(one finished, one rewound by a re-drive, one parked), asks the chat page a
question, and saves docs/img/console-*.png. Needs Debian's chromium (or
TURNKEEPER_CHROMIUM pointing at a Chromium).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from google.protobuf import json_format, struct_pb2
from grpc import aio
from playwright.async_api import Page, async_playwright, expect
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import create_server
from turnkeeper_server.config import Settings
from turnkeeper_server.messaging.embedded import EmbeddedNats

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "docs" / "img"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def value(obj: Any) -> struct_pb2.Value:
    v = struct_pb2.Value()
    json_format.Parse(json.dumps(obj), v)
    return v


def ev(seq: int, type_: str, data: Any) -> turns_pb2.EventInput:
    return turns_pb2.EventInput(seq=seq, type=type_, data_json=json.dumps(data))


def job_events(start: int, attempt: int, steps: range) -> list[turns_pb2.EventInput]:
    out, seq = [], start
    for i in steps:
        for word in ("step", str(i), "done"):
            out.append(ev(seq, "token", {"node": f"step{i}", "text": word + " "}))
            seq += 1
        out.append(ev(seq, "step", {"node": f"step{i}", "update": {"attempt": attempt}}))
        seq += 1
    return out


async def journal(stub: Any) -> None:
    """A finished turn, a re-driven one (one reset), a parked one."""

    async def begin(turn_id: str, agent: str, data: Any) -> None:
        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id=turn_id,
                thread_id=f"thread-{turn_id}",
                agent=agent,
                input=value(data),
                replica=f"{agent}-0",
                incarnation="inc-1",
            )
        )

    await begin("report-41", "jobs", {"job": "weekly report"})
    await stub.AppendEvents(
        turns_pb2.AppendEventsRequest(turn_id="report-41", events=job_events(1, 0, range(1, 3)))
    )
    await stub.FinishTurn(
        turns_pb2.FinishTurnRequest(
            turn_id="report-41",
            outcome=turns_pb2.OUTCOME_DONE,
            events=[ev(9, "final", {"output": "report sent"})],
        )
    )
    await begin("report-42", "jobs", {"job": "monthly report"})
    await stub.AppendEvents(
        turns_pb2.AppendEventsRequest(turn_id="report-42", events=job_events(1, 0, range(1, 3)))
    )
    await begin("deploy-7", "release", {"service": "billing"})
    await stub.ParkTurn(
        turns_pb2.ParkTurnRequest(
            turn_id="deploy-7",
            interrupt=value({"question": "deploy billing 2.4.1 to production?"}),
            events=[ev(1, "interrupt", {"value": {"question": "deploy billing 2.4.1?"}})],
        )
    )


async def rewind(stub: Any) -> None:
    """report-42's agent "dies": an operator re-drives it and attempt 1 finishes."""
    await stub.Redrive(turns_pb2.RedriveRequest(turn_id="report-42", force=True))
    await stub.ClaimTurn(
        turns_pb2.ClaimTurnRequest(
            turn_id="report-42", attempt=1, replica="jobs-1", incarnation="inc-2"
        )
    )
    await stub.AppendEvents(
        turns_pb2.AppendEventsRequest(
            turn_id="report-42", attempt=1, events=job_events(1, 1, range(1, 4))
        )
    )
    await stub.FinishTurn(
        turns_pb2.FinishTurnRequest(
            turn_id="report-42",
            attempt=1,
            outcome=turns_pb2.OUTCOME_DONE,
            events=[ev(13, "final", {"output": "report sent"})],
        )
    )


async def shoot(page: Page, name: str) -> None:
    await page.screenshot(path=str(OUT / f"{name}.png"), full_page=False)
    print(f"wrote docs/img/{name}.png")


async def main() -> int:
    chromium = os.environ.get("TURNKEEPER_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        print("no chromium: apt-get install chromium", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    nats = EmbeddedNats()
    nats_url = nats.start()
    data = Path(tempfile.mkdtemp(prefix="tk-shots-"))
    service = await create_server(
        Settings(
            turns_path=data / "turns.db",
            sessions_path=data / "sessions.db",
            listen="127.0.0.1:0",
            nats_url=nats_url,
            http_listen="127.0.0.1:0",
        )
    )
    agent = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.agents.pipeline_agent",
        cwd=REPO,
        env={
            **os.environ,
            "TURNKEEPER_ADDRESS": service.address,
            "NATS_URL": nats_url,
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            "PIPELINE_DELAY": "0.3",
        },
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert agent.stdout is not None and service.web is not None
        while not (await agent.stdout.readline()).startswith(b"ready "):
            pass
        base = service.web.url + "console/"
        async with aio.insecure_channel(service.address) as channel:
            stub = turns_pb2_grpc.TurnServiceStub(channel)
            await journal(stub)
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
                context = await browser.new_context(viewport={"width": 1200, "height": 760})
                page = await context.new_page()

                await page.goto(base + "turn.html?id=report-42")
                await expect(page.locator("#timeline li")).to_have_count(8)
                await rewind(stub)
                await expect(page.locator("#stream-status")).to_have_text("ended (DONE)")
                await shoot(page, "console-turn-reset")

                await page.goto(base + "turn.html?id=deploy-7")
                await expect(page.locator("#parked")).to_be_visible()
                await page.fill("#resume-value", '{"approved": true}')
                await shoot(page, "console-parked")

                chat = await context.new_page()
                await chat.goto(base + "chat?agent=pipeline")
                await chat.fill("#question", "What does turnkeeper keep when an agent dies?")
                await chat.click("#submit")
                await expect(chat.locator("#chat-status")).to_have_text("done")
                await shoot(chat, "chat-panel")

                await page.goto(base)
                await expect(page.locator("#turns tbody tr")).to_have_count(4)
                await expect(page.locator("#metrics .metric").first).to_be_visible()
                await shoot(page, "console-turns")
                await browser.close()
    finally:
        agent.terminate()
        await agent.wait()
        await service.stop(0)
        nats.stop()
        shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
