"""Both compose files, run service by service the way their containers would run
(tests/support/compose.py): the entrypoint, command and environment from the file,
the Dockerfile's ENV and WORKDIR, service names resolving to local ports. A service
that exits, or never becomes healthy, fails the test.

- compose.yaml (``docker compose up``): PostgreSQL, NATS with JetStream, two
  service replicas and the example agent all come up and report healthy, and the
  stack works end to end, through either replica.
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
from turnkeeper.v1 import turns_pb2

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
    assert set(stack.services) == {"postgres", "nats", "turnkeeper-1", "turnkeeper-2", "agent"}
    stack.up("agent")
    # The agent waited for both replicas' HEALTHCHECK; now its own is green too.
    for name in ("postgres", "turnkeeper-1", "turnkeeper-2", "agent"):
        stack.until_healthy(name)
    stack.supervise()

    # And the stack does its job: a turn dispatched to the agent over NATS finishes.
    async def one_turn() -> Transcript:
        nc = Client()
        await nc.connect(f"nats://127.0.0.1:{stack.host_port('nats', 4222)}")
        first, second = (
            f"127.0.0.1:{stack.host_port(name, 50051)}" for name in ("turnkeeper-1", "turnkeeper-2")
        )
        try:
            async with (
                AsyncTurnkeeperClient(ConnectionOptions(target=first)) as client,
                AsyncTurnkeeperClient(ConnectionOptions(target=second)) as other,
            ):
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
                # The other replica serves the same journal.
                status = await other.turn_status(
                    turns_pb2.TurnStatusRequest(turn_id=created["turn_id"])
                )
                assert status.state == turns_pb2.TURN_STATE_DONE
                assert status.last_seq == transcript.events[-1].seq
                # And the turn's events reach the JetStream stream (--jetstream). The
                # outbox mirrors them after their commit, so on a busy machine the last
                # ones may still be on their way when the turn is DONE: read the stream
                # until it holds them (bounded by the test's timeout).
                js = nc.jetstream()
                info = await js.stream_info("TURNKEEPER_VYSTAK")
                (subject,) = info.config.subjects or []
                sub = await js.subscribe(subject, ordered_consumer=True)
                for _ in transcript.events:
                    await sub.next_msg(timeout=None)
                await sub.unsubscribe()
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
