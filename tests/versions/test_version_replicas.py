"""Two versions of a graph on two real replica processes (docs/versions.md): a turn
parked by v1 is resumed while only a replica of another version is alive. Under each
policy the right replica takes it, or it waits, visibly, for v1, and a v1 replica
started later finishes it; the turn's output says which code ran each step, so
nothing ran on the wrong code."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.operator._cli import main
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.journal.versions import VersionPolicies

from tests.support.agents import Agent, Agents, agents_for, result
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory
from tests.support.turns import settled, value
from tests.support.versioned_graphs import COMPATIBLE, build

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

AGENT = "writer"
SCRIPT = Path(__file__).resolve().parent.parent / "agents" / "versioned_agent.py"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def policies() -> VersionPolicies:
    return VersionPolicies()


@pytest.fixture
async def service(
    make_service: ServiceFactory, nats_server: NatsServer, policies: VersionPolicies
) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, version_policies=policies)


async def replica(agents: Agents, name: str, variant: str) -> Agent:
    return await agents.start(
        name,
        agent=AGENT,
        script=SCRIPT,
        extra_env={"GRAPH_VARIANT": variant, "PYTHONPATH": str(ROOT)},
    )


async def park_on_v1(nc: Client, client: AsyncTurnkeeperClient, turn_id: str) -> None:
    await result(
        nc,
        "responses/create",
        {
            "input": {"log": []},
            "turn_id": turn_id,
            "thread_id": f"th-{turn_id}",
            "background": True,
        },
        agent=AGENT,
    )
    await settled(client, turn_id, pb.TURN_STATE_PARKED)


def output(events: Any) -> list[str]:
    """The ``log`` of the turn's final output: which code ran each step."""
    final = [json.loads(e.data_json) for e in events if e.type == "final"]
    assert final, [e.type for e in events]
    return list(final[-1]["output"]["log"])


CASES = [
    ("pin", "label", False),
    ("compatible", "label", True),
    ("compatible", "new-channel", True),
    ("compatible", "renamed", False),
    ("compatible", "removed", False),
    ("compatible", "reducer", False),
    ("latest", "new-channel", True),
]


@pytest.mark.parametrize(
    ("policies", "variant", "expect_taken"),
    [(VersionPolicies(p), v, t) for p, v, t in CASES],
    ids=[f"{p}-{v}" for p, v, _ in CASES],
)
async def test_a_parked_turn_resumes_only_on_code_the_policy_allows(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    tmp_path: Path,
    nc: Client,
    client: AsyncTurnkeeperClient,
    variant: str,
    expect_taken: bool,
) -> None:
    turn_id = f"t-{variant}"
    async with agents_for(service.address, nats_server.url, tmp_path / "side.log") as agents:
        old = await replica(agents, "r-old", "v1")
        await park_on_v1(nc, client, turn_id)
        # CI's replay check, against the threads of the running service as the v1
        # bridge checkpointed them, says what the policy will do below.
        graph_file = tmp_path / "new_graph.py"
        graph_file.write_text(
            f"from tests.support.versioned_graphs import build\ngraph = build({variant!r})[0]\n"
        )
        code = await asyncio.to_thread(
            main,
            [
                "replay-check",
                "--graph",
                f"{graph_file}:graph",
                "--agent",
                AGENT,
                "--address",
                service.address,
            ],
        )
        assert code == (0 if variant in COMPATIBLE else 1)
        await replica(agents, "r-new", variant)
        # The old code is gone (a rolling upgrade's last old replica, stopped cleanly).
        await old.close()
        await client.resume_detached(pb.ResumeDetachedRequest(turn_id=turn_id, resume=value("yes")))
        _, label = build(variant)
        if expect_taken:
            turn = await settled(client, turn_id, pb.TURN_STATE_DONE)
            assert turn.graph.label == label
            events = (await client.list_events(pb.ListEventsRequest(turn_id=turn_id))).events
            assert output(list(events)) == ["draft@v1", f"publish@{label}:yes"]
            return
        # Nobody may take it: it waits, RUNNING, and says for which version.
        status = await client.turn_status(pb.TurnStatusRequest(turn_id=turn_id))
        assert status.state == pb.TURN_STATE_RUNNING
        assert status.waiting_for.label == "v1"
        assert "waits for a replica of agent 'writer' serving graph version" in status.detail
        listed = (await client.list_agents(pb.ListAgentsRequest(agent=AGENT))).agents[0]
        assert [w.turn_id for w in listed.waiting] == [turn_id]
        assert [r.graph.label for r in listed.replicas] == [label]
        # A replica of the old code comes back (a rollback, or one kept for it): it
        # finishes the turn, and the new code ran none of its steps.
        await replica(agents, "r-old-2", "v1")
        turn = await settled(client, turn_id, pb.TURN_STATE_DONE)
        assert turn.owner.replica in ("", "r-old-2")
        events = (await client.list_events(pb.ListEventsRequest(turn_id=turn_id))).events
        assert output(list(events)) == ["draft@v1", "publish@v1:yes"]
        assert not any(f"@{label}" in line for line in output(list(events)))


@pytest.mark.parametrize("policies", [VersionPolicies("pin")])
async def test_hand_offs_reach_the_right_version_while_a_wrong_one_is_alive(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    tmp_path: Path,
    nc: Client,
    client: AsyncTurnkeeperClient,
) -> None:
    """Both versions alive: on the agent's queue group each resume would reach the
    replica of the other version half the time, which could only refuse it. Routed by
    version, the v1 replica gets every one and the other never hears of them."""
    turn_ids = [f"t-route-{i}" for i in range(4)]
    async with agents_for(service.address, nats_server.url, tmp_path / "side.log") as agents:
        old = await replica(agents, "r-old", "v1")
        for turn_id in turn_ids:
            await park_on_v1(nc, client, turn_id)
        new = await replica(agents, "r-new", "removed")
        for turn_id in turn_ids:
            await client.resume_detached(
                pb.ResumeDetachedRequest(turn_id=turn_id, resume=value("yes"))
            )
        for turn_id in turn_ids:
            turn = await settled(client, turn_id, pb.TURN_STATE_DONE)
            assert turn.graph.label == "v1"
            events = (await client.list_events(pb.ListEventsRequest(turn_id=turn_id))).events
            assert output(list(events)) == ["draft@v1", "publish@v1:yes"]
        assert not [line for line in new.lines if "t-route-" in line], new.output()
        assert any("t-route-3" in line and "executing" in line for line in old.lines)
