"""Double-texting: StartTurn (responses/create) on a thread whose turn is still live,
with each of LangGraph Platform's strategies, against real agent processes. Every test
runs on both backends (on PostgreSQL the queue is QUEUED rows beside the one-live
partial unique index, which leaves them out)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2

from tests.support.agents import Agent, Agents, Panel, agents_for, result, rpc, until
from tests.support.nats import Collector, NatsServer
from tests.support.procs import ServiceProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(150), pytest.mark.both_backends]


def create(turn_id: str, strategy: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "input": {"job": turn_id, "results": []},
        "turn_id": turn_id,
        "thread_id": "th-busy",
        "background": True,
    }
    if strategy is not None:
        params["multitask_strategy"] = strategy
    return params


async def busy_thread(agents: Agents, nc: Client, seen: Collector) -> Agent:
    """An agent whose turn t1 is mid step2 (waiting for SIGUSR1) on th-busy."""
    agent = await agents.start(slow_step=2)
    await result(nc, "responses/create", create("t1"))
    await until(
        seen,
        lambda: any(
            m["type"] == "token" and m["data"]["node"] == "step2"
            for m in seen.on(".turn.events.t1")
        ),
    )
    return agent


async def final_results(client: AsyncTurnkeeperClient, turn_id: str) -> list[str]:
    panel = Panel()
    panel.start(client, turn_id)
    shown = await panel.ended()
    assert [t for _, t, _ in shown][-2:] == ["final", "turn.done"], shown
    results: list[str] = shown[-2][2]["output"]["results"]
    return results


async def state(client: AsyncTurnkeeperClient, turn_id: str) -> int:
    return (await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))).state


async def test_reject_is_the_default(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    agent = await busy_thread(agents, nc, seen)
    for strategy in (None, "reject"):
        refused = await rpc(nc, "responses/create", create(f"t2-{strategy}", strategy))
        assert refused["error"]["data"]["code"] == "FAILED_PRECONDITION"
        assert "already has a live turn 't1'" in refused["error"]["message"]
    unknown = await rpc(nc, "responses/create", create("t2", "later"))
    assert "multitask_strategy must be one of" in unknown["error"]["message"]
    agent.signal(signal.SIGUSR1)
    assert len(await final_results(client, "t1")) == 4


async def test_enqueue_runs_queued_turns_in_order_after_the_live_one(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    agent = await busy_thread(agents, nc, seen)
    for turn_id in ("t2", "t3"):
        queued = await result(nc, "responses/create", create(turn_id, "enqueue"))
        assert queued["status"] == "queued"
    status = await result(nc, "responses/turnStatus", {"turn_id": "t2"})
    # A contract panel keeps waiting on it; the exact state is beside (decision 192).
    assert (status["status"], status["state"]) == ("running", "queued")
    assert await state(client, "t1") == turns_pb2.TURN_STATE_RUNNING

    agent.signal(signal.SIGUSR1)
    # Each turn continues the thread: its results add to those of the turns before.
    assert len(await final_results(client, "t1")) == 4
    assert len(await final_results(client, "t2")) == 8
    assert len(await final_results(client, "t3")) == 12
    side = agents.side()
    starts = [i for i, line in enumerate(side) if line == "start step1 attempt=0"]
    ends = [i for i, line in enumerate(side) if line == "done step4"]
    assert len(starts) == len(ends) == 3
    # One after the other: each turn's first step comes after the previous one's last.
    assert ends[0] < starts[1] and ends[1] < starts[2]


async def test_interrupt_cancels_the_live_turn_and_keeps_its_checkpoints(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    agent = await busy_thread(agents, nc, seen)
    started = await result(nc, "responses/create", create("t2", "interrupt"))
    assert (started["status"], started["cancelled_turn_id"]) == ("in_progress", "t1")
    await agent.wait_line(lambda line: "t1 attempt=0" in line and "this execution stops" in line)
    agent.signal(signal.SIGUSR1)
    # t1 got as far as step1; its checkpoints stay, so t2 starts from its state.
    results = await final_results(client, "t2")
    assert len(results) == 5 and results[0] == "step 1 of t1 is done"
    t1 = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t1"))).turn
    assert (t1.state, t1.end_reason) == (turns_pb2.TURN_STATE_CANCELLED, "cancelled")
    assert "interrupt" in t1.error
    await until(
        seen, lambda: [m["type"] for m in seen.on(".turn.events.t1")][-1] == "turn.cancelled"
    )


async def test_rollback_cancels_the_live_turn_and_removes_its_checkpoints(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    agent = await busy_thread(agents, nc, seen)
    started = await result(nc, "responses/create", create("t2", "rollback"))
    assert started["cancelled_turn_id"] == "t1"
    await agent.wait_line(lambda line: "t1 attempt=0" in line and "this execution stops" in line)
    agent.signal(signal.SIGUSR1)
    # t1's checkpoints are gone: t2 runs on the thread as if t1 had never been.
    results = await final_results(client, "t2")
    assert results == [f"step {i} of t2 is done" for i in range(1, 5)]
    assert await state(client, "t1") == turns_pb2.TURN_STATE_CANCELLED


async def test_enqueued_turn_survives_a_service_sigkill(
    tmp_path: Path,
    nats_server: NatsServer,
    bus: tuple[Client, Collector],
    database_url: str | None,
) -> None:
    nc, seen = bus
    service = ServiceProcess(tmp_path / "data", nats_url=nats_server.url, database_url=database_url)
    address = service.start()
    try:
        async with (
            agents_for(address, nats_server.url, tmp_path / "side.log") as agents,
            AsyncTurnkeeperClient(ConnectionOptions(target=address)) as client,
        ):
            agent = await busy_thread(agents, nc, seen)
            queued = await result(nc, "responses/create", create("t2", "enqueue"))
            assert queued["status"] == "queued"

            service.kill()  # SIGKILL: the queue is only what the store holds
            service.start()
            assert await state(client, "t2") == turns_pb2.TURN_STATE_QUEUED
            agent.signal(signal.SIGUSR1)
            assert len(await final_results(client, "t1")) == 4
            assert len(await final_results(client, "t2")) == 8
    finally:
        service.kill()
