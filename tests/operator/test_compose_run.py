"""Both compose files, run service by service the way their containers would run
(tests/support/compose.py): the entrypoint, command and environment from the file,
the Dockerfile's ENV and WORKDIR, service names resolving to local ports. A service
that exits, or never becomes healthy, fails the test.

- compose.yaml (``docker compose up``): NATS, the service and the example agent
  all come up and report healthy, and the stack works end to end.
- examples/durable-four-step/compose.yaml (``docker compose run panel``): the
  agent SIGKILLs itself in step 2, its restart policy brings it back, and the
  panel sees the turn finish with every promise kept (exit 0).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.panel.follower import Transcript, TurnFollower

from tests.support.agents import result
from tests.support.compose import ROOT, Stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

FOUR_STEP = ROOT / "examples" / "durable-four-step" / "compose.yaml"


@pytest.fixture
def stack_of(tmp_path: Path) -> Iterator[list[Stack]]:
    stacks: list[Stack] = []
    yield stacks
    for stack in stacks:
        stack.down()


def test_compose_yaml_brings_every_service_up_healthy(
    tmp_path: Path, stack_of: list[Stack]
) -> None:
    stack = Stack(ROOT / "compose.yaml", tmp_path)
    stack_of.append(stack)
    assert set(stack.services) == {"nats", "turnkeeper", "agent"}
    stack.up("agent")
    # The agent waited for the service's HEALTHCHECK; now its own is green too.
    stack.until_healthy("turnkeeper")
    stack.until_healthy("agent")
    stack.supervise()
    # The service keeps its files on the volume mounted at /data.
    volume = tmp_path / "volumes" / "turnkeeper-data"
    assert {"turns.db", "sessions.db"} <= {p.name for p in volume.iterdir()}

    # And the stack does its job: a turn dispatched to the agent over NATS finishes.
    async def one_turn() -> Transcript:
        nc = Client()
        await nc.connect(f"nats://127.0.0.1:{stack.host_port('nats', 4222)}")
        options = ConnectionOptions(target=f"127.0.0.1:{stack.host_port('turnkeeper', 50051)}")
        try:
            async with AsyncTurnkeeperClient(options) as client:
                created = await result(
                    nc,
                    "responses/create",
                    {"input": {"topic": "compose", "results": []}, "background": True},
                    agent="four-step",
                )
                transcript = Transcript()
                async with TurnFollower(client, created["turn_id"]) as follower:
                    async for frame in follower:
                        transcript.apply(frame)
                return transcript
        finally:
            await nc.close()

    transcript = asyncio.run(one_turn())
    assert transcript.concluded is not None
    assert [e.type for e in transcript.events][-1] == "turn.done"
    stack.supervise()


def test_the_four_step_walkthrough_runs_in_its_compose_file(
    tmp_path: Path, stack_of: list[Stack]
) -> None:
    stack = Stack(FOUR_STEP, tmp_path)
    stack_of.append(stack)
    assert set(stack.services) == {"nats", "turnkeeper", "agent", "panel"}
    code = stack.run("panel")
    assert stack.last_run is not None
    output = stack.last_run.output()
    assert code == 0, output
    assert "every promise held" in output
    assert "RESET" in output
    # The agent died once in step 2 (SIGKILL) and compose's policy restarted it.
    agent = stack.running["agent"]
    assert agent.restarts == 1 and agent.exits == [-9], agent.output()
