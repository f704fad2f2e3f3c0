"""The bridge survives the death of its agent process: SIGKILL mid-step, a poison
turn, a replica that never comes back, a zombie, and NATS restarting meanwhile.

Agents are real subprocesses (tests/agents/job_agent.py) against a real service
and a real nats-server; the service's lease is 2 s, its claim window 1 s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agents, Panel, agents_for, all_events, result, shape
from tests.support.nats import Collector, NatsServer, subscribe

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

JOB = {"job": "report", "results": []}


@pytest.fixture
async def agents(
    service: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agents]:
    async with agents_for(service.address, nats_server.url, tmp_path / "side.log") as spawned:
        yield spawned


@pytest.fixture
async def client(service: TurnkeeperServer) -> AsyncIterator[AsyncTurnkeeperClient]:
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service.address)) as c:
        yield c


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[tuple[Client, Collector]]:
    nc, collector = await subscribe(nats_server.url, "vystak.turn.>")
    yield nc, collector
    await nc.close()


def events_on_nats(seen: Collector, turn_id: str) -> list[dict[str, object]]:
    return seen.on(f".turn.events.{turn_id}")


def rewinds_on_nats(seen: Collector, turn_id: str) -> list[dict[str, object]]:
    return [m for m in seen.on(".turn.rewind") if m["turn_id"] == turn_id]


def streaming(seen: Collector, turn_id: str, node: str) -> bool:
    return any(
        m["type"] == "token" and m["data"]["node"] == node  # type: ignore[index]
        for m in events_on_nats(seen, turn_id)
    )


async def status(client: AsyncTurnkeeperClient, turn_id: str) -> turns_pb2.TurnStatusResponse:
    return await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))


async def test_sigkill_mid_step_two_then_restart_finishes_with_an_exact_replay(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    first = await agents.start(slow_step=2)
    # The replacement imports while the first runs; its incarnation starts at go().
    second = await agents.spawn(warm=True)

    created = await result(
        nc,
        "responses/create",
        {"input": JOB, "turn_id": "t-crash", "thread_id": "th-crash", "background": True},
    )
    assert created == {"turn_id": "t-crash", "thread_id": "th-crash", "status": "in_progress"}
    panel = Panel()
    panel.start(client, "t-crash")

    # Step 2 has streamed its reply (appended, mirrored to NATS) and now waits.
    await seen.wait_for(lambda: streaming(seen, "t-crash", "step2"))
    await first.kill()
    await second.go()
    shown = await panel.ended()

    final = await status(client, "t-crash")
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_DONE, 1)

    # Completed steps ran once; step 2 (running at the crash) ran again.
    runs = Counter(line.rsplit(" attempt=", 1)[0] for line in agents.side())
    assert runs["start step1"] == 1 and runs["done step1"] == 1
    assert runs["start step2"] == 2 and runs["done step2"] == 1
    assert runs["start step3"] == runs["start step4"] == 1
    assert [line.split(" key=")[0] for line in agents.side() if "ledger" in line] == [
        "ledger step3"
    ]

    events = await all_events(client, "t-crash")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    boundary = next(e.seq for e in events if e.type == "step" and '"step1"' in e.data_json)
    assert {e.attempt for e in events if e.seq <= boundary} == {0}
    assert {e.attempt for e in events if e.seq > boundary} == {1}

    # One rewind on NATS, to the end of step 1; the panel got one reset to it.
    await seen.wait_for(lambda: events_on_nats(seen, "t-crash")[-1:][0]["type"] == "turn.done")
    rewinds = rewinds_on_nats(seen, "t-crash")
    assert len(rewinds) == 1
    assert rewinds[0]["seq"] == boundary and rewinds[0]["attempt"] == 1
    assert [r.seq for r in panel.resets] == [boundary]

    # The panel ends with exactly the retained events, which are exactly those
    # of an uninterrupted run of the same job.
    assert shown == shape(events)
    created = await result(
        nc,
        "responses/create",
        {"input": JOB, "turn_id": "t-ref", "thread_id": "th-ref", "background": True},
    )
    reference = Panel()
    reference.start(client, "t-ref")
    assert shown == await reference.ended()
    assert [t for _, t, _ in shown] == (
        ["token"] * 11 + ["step"]
        + ["token"] * 11 + ["step"]
        + ["token"] * 11 + ["tool_call_start", "tool_call_end", "step"]
        + ["token"] * 11 + ["step"]
        + ["final", "turn.done"]
    )  # fmt: skip
