"""Graph versions in LangGraph.js agents (docs/versions.md): the TypeScript runner
announces the version it serves, sends it with Redrive, ClaimTurn and StartTurn, and
stamps its root checkpoints, so the agent's version policy holds for it as for the
Python bridge. Two versions of clients/node/testing/agent.mjs's approval graph run as
two real runner processes: a turn parked by v1 is resumed while only the other
version is alive; under each policy that replica takes it, or the turn waits,
visibly, for v1 and a v1 replica started later finishes it. The answer says which
code ran it (`answered@<label>`)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.journal.versions import VersionPolicies

from tests.support.agents import Agent, result
from tests.support.nats import NatsServer
from tests.support.node import NodeAgents
from tests.support.service import ServiceFactory, announced
from tests.support.turns import settled, value

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

AGENT = "js-versions"

# (policy, the new replica's variant and label, whether it may take a v1 turn)
CASES = [
    ("pin", ("", "v2"), False),
    ("compatible", ("", "v2"), True),
    ("compatible", ("renamed", "v2"), False),
    ("compatible", ("reducer", "v2"), False),
    ("latest", ("reducer", "v2"), True),
]


@pytest.fixture
def policies() -> VersionPolicies:
    return VersionPolicies()


@pytest.fixture
async def service(
    make_service: ServiceFactory, nats_server: NatsServer, policies: VersionPolicies
) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, version_policies=policies)


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    connection = await nats.connect(nats_server.url)
    yield connection
    await connection.close()


async def live_replicas(
    service: TurnkeeperServer, client: AsyncTurnkeeperClient, replicas: set[str]
) -> list[pb.AgentReplica]:
    """The agent's live replicas (ListAgents), once exactly `replicas` are announced."""
    directory = service.engine.directory
    await announced(service, lambda: {r.replica for r in directory.replicas(AGENT)} == replicas)
    [listed] = (await client.list_agents(pb.ListAgentsRequest(agent=AGENT))).agents
    return list(listed.replicas)


def answer_of(events: Any) -> list[str]:
    final = [json.loads(e.data_json) for e in events if e.type == "final"]
    assert final, [e.type for e in events]
    return list(final[-1]["output"]["log"])


@pytest.mark.parametrize(
    ("policies", "new", "expect_taken"),
    [(VersionPolicies(p), n, t) for p, n, t in CASES],
    ids=[f"{p}-{n[0] or 'label'}" for p, n, _ in CASES],
)
async def test_a_parked_turn_resumes_only_on_code_the_policy_allows(
    js_agents: NodeAgents,
    service: TurnkeeperServer,
    nc: Client,
    client: AsyncTurnkeeperClient,
    new: tuple[str, str],
    expect_taken: bool,
) -> None:
    variant, label = new

    async def replica(name: str, variant: str, label: str) -> Agent:
        return await js_agents.start(
            name,
            graph="approval",
            extra_env={"GRAPH_VARIANT": variant, "TURNKEEPER_VERSION_LABEL": label},
        )

    turn_id = f"t-{variant or 'label'}"
    try:
        old = await replica("r-old", "", "v1")
        [v1] = await live_replicas(service, client, {"r-old"})
        assert v1.graph.label == "v1" and len(v1.graph.fingerprint) == 64
        # It serves no LangGraph API methods: its agent is not listed as an assistant.
        assert AGENT not in service.engine.directory.agents()
        await result(
            nc,
            "responses/create",
            {"input": "job", "turn_id": turn_id, "thread_id": f"th-{turn_id}", "background": True},
            agent=AGENT,
        )
        parked = await settled(client, turn_id, pb.TURN_STATE_PARKED)
        assert (parked.graph.fingerprint, parked.graph.label) == (v1.graph.fingerprint, "v1")

        await replica("r-new", variant, label)
        # The old code is gone (a rolling upgrade's last old replica), cleanly.
        await old.close()
        [v2] = await live_replicas(service, client, {"r-new"})
        assert v2.graph.fingerprint != v1.graph.fingerprint and v2.graph.label == label
        await client.resume_detached(pb.ResumeDetachedRequest(turn_id=turn_id, resume=value("yes")))
        if expect_taken:
            done = await settled(client, turn_id, pb.TURN_STATE_DONE)
            assert done.graph.label == label
            events = (await client.list_events(pb.ListEventsRequest(turn_id=turn_id))).events
            assert answer_of(events) == ['decision:"yes"', f"answered@{label}"]
            return
        # Nobody may take it: it waits, RUNNING, and says for which version.
        status = await client.turn_status(pb.TurnStatusRequest(turn_id=turn_id))
        assert status.state == pb.TURN_STATE_RUNNING
        assert status.waiting_for.label == "v1"
        assert "serving graph version" in status.detail
        # A replica of the old code comes back: it finishes the turn.
        await replica("r-old-2", "", "v1")
        done = await settled(client, turn_id, pb.TURN_STATE_DONE)
        events = (await client.list_events(pb.ListEventsRequest(turn_id=turn_id))).events
        assert answer_of(events) == ['decision:"yes"', "answered@v1"]
    finally:
        for agent in js_agents.spawned:
            await agent.kill()
