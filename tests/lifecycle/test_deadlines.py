"""Deadlines, enforced by the reaper: a turn RUNNING past its max run time and a turn
PARKED past its expiry end FAILED with a terminal event and a reason that GetTurn,
TurnStatus (gRPC and NATS) and the CLI show, and never before the deadline (checked
on the service's own timestamps)."""

from __future__ import annotations

import asyncio
import signal

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.operator._cli import main
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agents, Panel, all_events, job_turn, result, until, until_event
from tests.support.nats import Collector, NatsServer
from tests.support.service import ServiceFactory
from tests.support.turns import value

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.both_backends]

PARK_EXPIRY = 1.5


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    # The service-wide default park expiry is short; max run time is set per turn.
    return await make_service(nats_url=nats_server.url, park_expiry_seconds=PARK_EXPIRY)


def seconds(ts: object) -> float:
    return ts.ToNanoseconds() / 1e9  # type: ignore[attr-defined, no-any-return]


async def test_max_run_time_fails_a_turn_that_runs_too_long(
    agents: Agents,
    client: AsyncTurnkeeperClient,
    bus: tuple[Client, Collector],
    capsys: pytest.CaptureFixture[str],
    service: TurnkeeperServer,
) -> None:
    nc, seen = bus
    agent = await agents.start(slow_step=2)
    await result(nc, "responses/create", job_turn("t-slow", "th-slow", max_run_time=1.0))
    panel = Panel()
    panel.start(client, "t-slow")
    shown = await panel.ended()
    assert shown[-1][1:] == (
        "turn.failed",
        {"error": "the turn ran longer than its max run time of 1s", "reason": "max_run_time"},
    )
    turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t-slow"))).turn
    assert (turn.state, turn.end_reason) == (turns_pb2.TURN_STATE_FAILED, "max_run_time")
    assert not turn.HasField("run_deadline")
    terminal = (await all_events(client, "t-slow"))[-1]
    assert seconds(terminal.created_at) - seconds(turn.created_at) >= 1.0, "failed too early"
    # The replica stops the graph; the step's wait would have ended on SIGUSR1.
    await agent.wait_line(lambda line: "t-slow attempt=0" in line and "execution stops" in line)
    await agent.wait_line(lambda line: line == "cancelled in step2")
    agent.signal(signal.SIGUSR1)
    status = await result(nc, "responses/turnStatus", {"turn_id": "t-slow"})
    assert (status["status"], status["end_reason"]) == ("failed", "max_run_time")
    grpc_status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-slow"))
    assert grpc_status.end_reason == "max_run_time"
    capsys.readouterr()
    code = await asyncio.to_thread(
        main, ["turns", "status", "t-slow", "--address", service.address]
    )
    assert code == 0 and "end_reason=max_run_time" in capsys.readouterr().out
    await until(
        seen, lambda: [m["type"] for m in seen.on(".turn.events.t-slow")][-1] == "turn.failed"
    )


async def test_park_expiry_fails_a_turn_nobody_resumed(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    await agents.start(graph="approval")
    await result(nc, "responses/create", job_turn("t-wait", "th-wait"))
    await until_event(seen, "t-wait", "interrupt")
    parked = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t-wait"))).turn
    assert parked.state == turns_pb2.TURN_STATE_PARKED
    assert parked.HasField("park_deadline") and not parked.HasField("run_deadline")

    panel = Panel()
    panel.start(client, "t-wait")
    shown = await panel.ended()
    assert shown[-1][2]["reason"] == "park_expired"
    turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t-wait"))).turn
    assert (turn.state, turn.end_reason) == (turns_pb2.TURN_STATE_FAILED, "park_expired")
    assert "parked longer than its expiry of 1.5s" in turn.error
    events = await all_events(client, "t-wait")
    interrupt = next(e for e in events if e.type == "interrupt")
    assert seconds(events[-1].created_at) - seconds(interrupt.created_at) >= PARK_EXPIRY
    # The thread is free again.
    started = await result(
        nc,
        "responses/create",
        {"input": None, "thread_id": "th-wait", "turn_id": "t-again", "background": True},
    )
    assert started["turn_id"] == "t-again"


async def test_a_resume_restarts_the_run_clock_and_clears_the_park_deadline(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    await agents.start(graph="approval")
    await result(nc, "responses/create", job_turn("t-ok", "th-ok"))
    await until_event(seen, "t-ok", "interrupt")
    resumed = await client.resume_detached(
        turns_pb2.ResumeDetachedRequest(turn_id="t-ok", resume=value({"approved": True}))
    )
    assert resumed.turn.HasField("run_deadline") and not resumed.turn.HasField("park_deadline")
    panel = Panel()
    panel.start(client, "t-ok")
    assert (await panel.ended())[-1][1] == "turn.done"
    turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t-ok"))).turn
    assert (turn.state, turn.end_reason) == (turns_pb2.TURN_STATE_DONE, "")
