"""CancelTurn with real agent processes: the graph stops mid-step, exactly one
turn.cancelled reaches WatchTurn and NATS, a late write of the cancelled execution
is refused by fencing, and the thread takes a new turn at once."""

from __future__ import annotations

import json
import signal

import grpc
import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import TurnkeeperError
from turnkeeper.v1 import checkpoints_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import (
    Agents,
    Panel,
    all_events,
    job_turn,
    result,
    rpc,
    until,
    until_event,
)
from tests.support.nats import Collector, NatsServer
from tests.support.service import ServiceFactory
from tests.support.turns import events

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.both_backends]


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    # A long lease: heartbeats are rare, so the stop the replica shows comes from the
    # cancel notification over NATS, not from a refused heartbeat.
    return await make_service(nats_url=nats_server.url, lease_seconds=30.0)


def cancelled_frames(seen: Collector, turn_id: str) -> list[dict[str, object]]:
    return [m for m in seen.on(f".turn.events.{turn_id}") if m["type"] == "turn.cancelled"]


async def test_cancel_a_running_turn_mid_step_stops_its_graph(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    agent = await agents.start(slow_step=2)
    await result(nc, "responses/create", job_turn("t-run", "th-run"))
    panel = Panel()
    panel.start(client, "t-run")
    # step2 streams its reply, then waits (for SIGUSR1): the turn is mid-step.
    await until(
        seen,
        lambda: any(
            m["type"] == "token" and m["data"]["node"] == "step2"
            for m in seen.on(".turn.events.t-run")
        ),
    )

    answer = await result(
        nc, "responses/cancel", {"turn_id": "t-run", "reason": "the user pressed stop"}
    )
    assert answer["status"] == "cancelled" and answer["checkpoints_removed"] == 0
    # The replica stops the graph there and then, on the NATS notification or on its
    # next write refused (whichever comes first): the cancellation reaches step2
    # before anything releases it.
    await agent.wait_line(lambda line: "t-run attempt=0" in line and "execution stops" in line)
    await agent.wait_line(lambda line: line == "cancelled in step2")
    shown = await panel.ended()
    # Released now, a graph still running would go on to "done step2".
    agent.signal(signal.SIGUSR1)

    assert [t for _, t, _ in shown].count("turn.cancelled") == 1
    assert shown[-1][1] == "turn.cancelled"
    assert shown[-1][2] == {
        "reason": "cancelled",
        "rollback": False,
        "detail": "the user pressed stop",
    }
    await until(seen, lambda: len(cancelled_frames(seen, "t-run")) == 1)
    turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t-run"))).turn
    assert (turn.state, turn.end_reason) == (turns_pb2.TURN_STATE_CANCELLED, "cancelled")
    assert not turn.HasField("owner")
    status = await result(nc, "responses/turnStatus", {"turn_id": "t-run"})
    assert status["end_reason"] == "cancelled"

    # A late write of the cancelled execution is refused by fencing (ABORTED).
    with pytest.raises(TurnkeeperError) as refused:
        await client.append_events(
            turns_pb2.AppendEventsRequest(
                turn_id="t-run", attempt=0, events=events(turn.last_seq + 1, "token")
            )
        )
    assert refused.value.code == grpc.StatusCode.ABORTED
    with pytest.raises(TurnkeeperError) as fenced_put:
        await client.put_checkpoint(
            checkpoints_pb2.PutCheckpointRequest(
                thread_id="th-run",
                checkpoint_id="late",
                checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
                fence=checkpoints_pb2.TurnFence(turn_id="t-run", attempt=0),
            )
        )
    assert fenced_put.value.code == grpc.StatusCode.ABORTED

    # The thread is free at once; the new turn runs to the end (step2 no longer waits).
    await result(nc, "responses/create", job_turn("t-next", "th-run"))
    follow = Panel()
    follow.start(client, "t-next")
    assert (await follow.ended())[-1][1] == "turn.done"
    # The cancelled turn's graph ran no node after step2 was stopped; the new turn
    # ran from the top.
    side = agents.side()
    second = side.index("start step1 attempt=0", 1)
    first_turn, next_turn = side[:second], side[second:]
    assert "start step2 attempt=0" in first_turn
    assert "done step2" not in first_turn and "start step3 attempt=0" not in first_turn
    assert next_turn.count("start step4 attempt=0") == 1
    # Exactly one terminal event for the cancelled turn, in the journal too.
    types = [e.type for e in await all_events(client, "t-run")]
    assert types.count("turn.cancelled") == 1 and types[-1] == "turn.cancelled"


async def test_cancel_a_parked_turn(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    await agents.start(graph="approval")
    await result(nc, "responses/create", job_turn("t-park", "th-park"))
    await until_event(seen, "t-park", "interrupt")
    panel = Panel()
    panel.start(client, "t-park")

    response = await client.cancel_turn(turns_pb2.CancelTurnRequest(turn_id="t-park"))
    assert response.turn.state == turns_pb2.TURN_STATE_CANCELLED
    shown = await panel.ended()
    assert [t for _, t, _ in shown][-2:] == ["interrupt", "turn.cancelled"]
    await until(seen, lambda: len(cancelled_frames(seen, "t-park")) == 1)

    # Nothing to resume any more.
    again = await rpc(nc, "responses/resumeDetached", {"turn_id": "t-park", "resume": True})
    assert again["error"]["data"]["code"] == "FAILED_PRECONDITION"
    # The thread's checkpoints stay (no rollback): the new turn sees the old results.
    checkpoint = await client.get_checkpoint(
        checkpoints_pb2.GetCheckpointRequest(thread_id="th-park")
    )
    assert checkpoint.HasField("checkpoint")
    await result(nc, "responses/create", job_turn("t-park2", "th-park"))
    await until_event(seen, "t-park2", "interrupt")


async def test_cancel_of_a_finished_turn_is_failed_precondition(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, _ = bus
    await agents.start()
    await result(nc, "responses/create", job_turn("t-done", "th-done"))
    panel = Panel()
    panel.start(client, "t-done")
    assert (await panel.ended())[-1][1] == "turn.done"

    with pytest.raises(TurnkeeperError) as refused:
        await client.cancel_turn(turns_pb2.CancelTurnRequest(turn_id="t-done"))
    assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "already over (DONE)" in refused.value.message
    over_nats = await rpc(nc, "responses/cancel", {"turn_id": "t-done"})
    assert over_nats["error"]["data"]["code"] == "FAILED_PRECONDITION"
    # A second cancel of a cancelled turn is refused the same way.
    await result(nc, "responses/create", job_turn("t-twice", "th-done"))
    await client.cancel_turn(turns_pb2.CancelTurnRequest(turn_id="t-twice"))
    with pytest.raises(TurnkeeperError) as twice:
        await client.cancel_turn(turns_pb2.CancelTurnRequest(turn_id="t-twice"))
    assert twice.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert [e.type for e in await all_events(client, "t-twice")].count("turn.cancelled") == 1


async def test_a_forged_stop_notice_stops_nothing(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    """The service's `turnkeeper/cancel` on the control subject is a hint: a bridge
    asks the service before stopping a run, so a notice for a turn that still runs
    (forged by whoever could publish there) is ignored and the turn goes on."""
    nc, seen = bus
    agent = await agents.start(slow_step=2)
    await result(nc, "responses/create", job_turn("t-forged", "th-forged"))
    panel = Panel()
    panel.start(client, "t-forged")
    await until(
        seen,
        lambda: any(
            m["type"] == "token" and m["data"]["node"] == "step2"
            for m in seen.on(".turn.events.t-forged")
        ),
    )
    notice = {
        "jsonrpc": "2.0",
        "method": "turnkeeper/cancel",
        "params": {"turn_id": "t-forged", "attempt": 0, "reason": "cancelled"},
    }
    await nc.publish("vystak.default.agents.jobs.control", json.dumps(notice).encode())
    await agent.wait_line(lambda line: "t-forged attempt=0" in line and "ignored" in line)
    agent.signal(signal.SIGUSR1)
    shown = await panel.ended()
    assert shown[-1][1] == "turn.done"
    assert "cancelled in step2" not in agent.lines
