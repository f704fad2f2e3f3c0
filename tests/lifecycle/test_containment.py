"""Poison containment with real agent processes: a turn that kills its agent every
time it runs shares the process with healthy turns, and the agent is restarted
after every crash (as a container would be). The healthy turns all finish DONE,
none of them charged; the poison turn ends FAILED after exactly the cap. On SQLite
alone (decision 710): what PostgreSQL adds here, the cap's count and the re-drive's
claim in its SQL, tests/service/turns/test_turn_states.py checks on both backends
(test_redrive_cap_fails_the_turn_with_one_synthetic_terminal_event), and
tests/langgraph_api/test_sdk_crash.py re-drives a killed agent's run on both."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2

from tests.support.agents import Agent, Agents, Panel, job_turn, result, until
from tests.support.nats import Collector

# The timeout is for a hang. The test starts an agent process seven times (a cold
# interpreter importing langgraph and grpc each time): on a loaded machine, with the
# suite's other worker busy too, that alone took past 240 s while the test progressed.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(480)]


@pytest.fixture(autouse=True)
def healthy_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # Long enough that h1 and h2 are surely still in the gate when the poison strikes.
    monkeypatch.setenv("HEALTHY_SECONDS", "2")


HEALTHY = ("h1", "h2", "h3")


async def create(nc: Client, job: str) -> None:
    await result(nc, "responses/create", job_turn(job))


def in_gate(seen: Collector, job: str) -> bool:
    return any(
        m["type"] == "step" and m["data"]["node"] == "step1" for m in seen.on(f".turn.events.{job}")
    )


async def test_a_poison_turn_fails_alone_and_healthy_turns_finish(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    agent: Agent = await agents.start(graph="mixed")
    panels = {job: Panel() for job in (*HEALTHY, "poison-1")}
    # h1 and h2 are in the gate when the poison turn arrives; h3 comes right after.
    for job in ("h1", "h2"):
        await create(nc, job)
        panels[job].start(client, job)
    await until(seen, lambda: in_gate(seen, "h1") and in_gate(seen, "h2"))
    for job in ("poison-1", "h3"):
        await create(nc, job)
        panels[job].start(client, job)

    ended = asyncio.ensure_future(asyncio.gather(*(p.ended() for p in panels.values())))
    restarts = 0
    while True:
        exited = asyncio.ensure_future(agent.wait_exit())
        await asyncio.wait({ended, exited}, return_when=asyncio.FIRST_COMPLETED)
        if ended.done():
            exited.cancel()
            break
        restarts += 1
        assert restarts <= 12, "the agent kept crashing"
        # Same replica name: a restart. Not awaited to its `ready`: its startup Redrive
        # hands it the turn on probation, which may kill it before it announces
        # itself (the announcement waits for the NATS subscription too); that exit
        # is the next crash of this loop.
        agent = await agents.spawn(graph="mixed")
    await ended

    for job in HEALTHY:
        turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=job))).turn
        assert turn.state == turns_pb2.TURN_STATE_DONE, (job, turn.error)
        assert turn.crashes_charged == 0, job
    poison = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="poison-1"))).turn
    assert poison.state == turns_pb2.TURN_STATE_FAILED
    assert (
        poison.error == "turn re-driven 3 times and orphaned again: the re-drive cap is 3 re-drives"
    )
    assert poison.crashes_charged == 3
    # It killed its agent: twice among the healthy turns (nobody charged, then the
    # suspects held back), then four times alone on probation (three charged
    # re-drives and the crash that hit the cap).
    kills = [line for line in agents.side() if line.startswith("poison poison-1")]
    assert len(kills) == restarts == 6
    assert panels["poison-1"].shown[-1][1] == "turn.failed"
