"""Park and resume through the bridge: a node calls interrupt(), the turn parks with
no terminal event, and a ResumeDetached (over the bridge's JSON-RPC, or straight
to the service with grpcurl) finishes it, even across an agent restart."""

from __future__ import annotations

import json
from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import (
    Agents,
    Panel,
    all_events,
    job_turn,
    result,
    rpc,
    until_event,
)
from tests.support.grpcurl import grpcurl
from tests.support.nats import Collector

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


async def create_and_park(
    nc: Client, seen: Collector, client: AsyncTurnkeeperClient, turn_id: str
) -> Panel:
    """responses/create on the approval graph; returns once the turn is PARKED."""
    created = await result(nc, "responses/create", job_turn(turn_id))
    assert created["status"] == "in_progress"
    panel = Panel()
    panel.start(client, turn_id)
    await until_event(seen, turn_id, "interrupt")
    # The interrupt event is committed with the park, in one transaction.
    turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=turn_id))).turn
    assert turn.state == turns_pb2.TURN_STATE_PARKED
    assert turn.interrupt.struct_value["question"] == f"approve {turn_id}?"
    assert not turn.HasField("owner")
    types = [e.type for e in await all_events(client, turn_id)]
    assert types[-1] == "interrupt"
    assert not any(t.startswith("turn.") for t in types), "parking wrote a terminal event"
    return panel


def approved(side: list[str], turn_id: str) -> list[str]:
    """What the approval node did after its interrupt() returned (job = turn_id)."""
    return [line for line in side if line.startswith(f"approve {turn_id} resumed")]


async def test_park_then_resume_detached_after_the_agent_restarted(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    first = await agents.start(graph="approval")
    second = await agents.spawn(graph="approval", warm=True)
    panel = await create_and_park(nc, seen, client, "t-park")
    assert await result(nc, "responses/turnStatus", {"turn_id": "t-park"}) == {
        "turn_id": "t-park",
        "status": "parked",
        "state": "parked",
        "attempts": 0,
        "last_seq": (await all_events(client, "t-park"))[-1].seq,
        "error": "",
    }

    # The agent dies while the turn is parked; a new process of it resumes the turn.
    await first.kill()
    await second.go()
    await second.ready()
    resumed = await result(
        nc, "responses/resumeDetached", {"turn_id": "t-park", "resume": {"approved": True}}
    )
    assert resumed == {
        "turn_id": "t-park",
        "status": "running",
        "state": "running",
        "dispatched": True,
    }
    shown = await panel.ended()

    final = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-park"))
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_DONE, 0)
    assert approved(agents.side(), "t-park") == [
        "approve t-park resumed with {'approved': True} attempt=0"
    ]
    types = [t for _, t, _ in shown]
    assert types.count("interrupt") == 1 and types[-2:] == ["final", "turn.done"]
    assert shown[-2][2]["output"]["results"][1] == "approved={'approved': True}"
    assert [line for line in agents.side() if line.startswith("start step1")] == [
        "start step1 attempt=0"
    ]

    # A second resume is refused: the turn is no longer parked.
    again = await rpc(nc, "responses/resumeDetached", {"turn_id": "t-park", "resume": True})
    assert again["error"]["code"] == -32000
    assert again["error"]["data"]["code"] == "FAILED_PRECONDITION"


async def test_resume_detached_with_grpcurl_live_and_while_no_replica_is_up(
    agents: Agents,
    client: AsyncTurnkeeperClient,
    bus: tuple[Client, Collector],
    service: TurnkeeperServer,
) -> None:
    nc, seen = bus
    agent = await agents.start(graph="approval")

    async def resume_with_grpcurl(turn_id: str) -> dict[str, Any]:
        out = await grpcurl(
            service.address,
            "turnkeeper.v1.TurnService/ResumeDetached",
            data={"turn_id": turn_id, "resume": {"approved": "by grpcurl"}},
        )
        answer: dict[str, Any] = json.loads(out.stdout)
        return answer

    # A live replica takes the resume the service hands it.
    panel = await create_and_park(nc, seen, client, "t-grpcurl")
    answer = await resume_with_grpcurl("t-grpcurl")
    assert answer["turn"]["state"] == "TURN_STATE_RUNNING"
    assert answer.get("dispatched") is True
    assert (await panel.ended())[-1][1] == "turn.done"

    # No replica up: the resumed turn waits, RUNNING without an owner, and the next
    # agent process takes it in its startup Redrive.
    panel = await create_and_park(nc, seen, client, "t-grpcurl-2")
    await agent.kill()
    answer = await resume_with_grpcurl("t-grpcurl-2")
    assert answer["turn"]["state"] == "TURN_STATE_RUNNING"
    assert not answer.get("dispatched")
    await agents.start(graph="approval")
    shown = await panel.ended()
    assert shown[-1][1] == "turn.done"
    final = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-grpcurl-2"))
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_DONE, 0)
    assert approved(agents.side(), "t-grpcurl-2") == [
        "approve t-grpcurl-2 resumed with {'approved': 'by grpcurl'} attempt=0"
    ]
