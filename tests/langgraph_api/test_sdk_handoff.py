"""A run starts in one message (decision 370): the service journals its turn and hands
it to a replica, so the run's answer does not wait for an agent. A replica that got
the hand-off and died before claiming it (stopped, then SIGKILLed) leaves the turn
RUNNING and owned by nobody, `pending` to the SDK; the next replica of the graph
takes it (its startup Redrive) and the run completes, no crash charged: nothing ran.
A replica that takes hand-offs with their claim (decision 590) gets the turn already
claimed for it, and runs it with no ClaimTurn."""

from __future__ import annotations

import asyncio
import signal
from typing import Any

import pytest
from langgraph_sdk import get_client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.langgraph_api.conftest import GRAPHS
from tests.support.agents import PATIENCE
from tests.support.langgraph_host import hosted, hosts_for
from tests.support.nats import NatsServer
from tests.support.service import announced

ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "who takes it?"}]}


@pytest.mark.both_backends
@pytest.mark.timeout(120)
async def test_a_run_whose_replica_dies_before_claiming_it_is_taken_by_the_next(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
    api_url: str,
) -> None:
    async with (
        hosts_for(GRAPHS, service, nats_server, replica="handoff-a", step_delay=0.05) as hosts,
        get_client(url=api_url) as sdk,
    ):
        first = await hosts.start()
        # Subscribed on NATS, but answers nothing: the hand-off reaches it and is lost.
        first.signal(signal.SIGSTOP)
        # The run is journaled before the answer, which waits for no agent (through
        # the relay it waited for the agent's StartTurn, and would time out here).
        run = await asyncio.wait_for(sdk.runs.create(None, ASSISTANT, input=QUESTION), PATIENCE)
        run_id, thread_id = run["run_id"], run["thread_id"]
        assert run["status"] == "pending"
        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run_id))
        assert status.state == turns_pb2.TURN_STATE_RUNNING
        assert (await sdk.runs.get(thread_id, run_id))["status"] == "pending"

        await first.kill()
        await hosts.start("handoff-b")
        final = await asyncio.wait_for(sdk.runs.join(thread_id, run_id), PATIENCE)
        assert isinstance(final, dict) and final["step"] == "generate"
        assert final.get("completed_answer_id") == f"answer-{run_id}"
        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run_id))
        assert status.state == turns_pb2.TURN_STATE_DONE
        # Never re-driven, no crash charged, nothing rewound: nothing had run. The
        # hand-off carried its claim to the first replica (decision 590); offered
        # again untaken, the turn was taken as a new attempt, charged to nobody, so
        # that a late copy of the first hand-off is fenced.
        got = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=run_id))).turn
        assert (got.attempts, got.crashes_charged, got.rewinds) == (1, 0, 0)
        assert (await sdk.runs.get(thread_id, run_id))["status"] == "success"


def takes_claims(service: TurnkeeperServer) -> bool:
    return any(r.claims for r in service.engine.directory.replicas(ASSISTANT))


@pytest.mark.both_backends
@pytest.mark.timeout(120)
async def test_a_runs_claim_rides_its_handoff(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
    api_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 590: the start's commit claims the turn for a replica that announced
    it takes such hand-offs; the replica runs it with no ClaimTurn."""
    claims: list[str] = []
    real = service.engine.turns.claim

    async def counted(**kwargs: Any) -> Any:
        claims.append(kwargs["turn_id"])
        return await real(**kwargs)

    monkeypatch.setattr(service.engine.turns, "claim", counted)
    async with (
        hosted(GRAPHS, service, nats_server, replica="ride-a"),
        get_client(url=api_url) as sdk,
    ):
        await announced(service, lambda: takes_claims(service))
        for _ in range(2):  # a new thread, then a run on a thread that has checkpoints
            thread = await sdk.threads.create()
            run = await sdk.runs.create(thread["thread_id"], ASSISTANT, input=QUESTION)
            final = await asyncio.wait_for(
                sdk.runs.join(thread["thread_id"], run["run_id"]), PATIENCE
            )
            assert isinstance(final, dict) and final["step"] == "generate"
            turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=run["run_id"]))).turn
            assert turn.state == turns_pb2.TURN_STATE_DONE
            assert (turn.attempts, turn.crashes_charged, turn.rewinds) == (0, 0, 0)
        assert claims == []


@pytest.mark.both_backends
@pytest.mark.timeout(120)
async def test_a_lost_handoff_with_its_claim_is_offered_again_and_charged_nothing(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
    api_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The hand-off carrying the claim is lost on NATS (the service believes it
    sent): the claim window passes with no heartbeat and no write, the reaper asks
    the owner, which does not run it, and offers the turn again, no crash charged;
    a replica claims it and the run completes."""
    lost: list[str] = []

    async def dropped(turn: Any, claim: str, *, reason: str) -> bool:
        lost.append(turn.turn_id)
        return True

    monkeypatch.setattr(service.engine.turns.handoffs, "dispatch_claimed", dropped)
    async with (
        hosted(GRAPHS, service, nats_server, replica="lost-a"),
        get_client(url=api_url) as sdk,
    ):
        await announced(service, lambda: takes_claims(service))
        run = await sdk.runs.create(None, ASSISTANT, input=QUESTION)
        run_id, thread_id = run["run_id"], run["thread_id"]
        final = await asyncio.wait_for(sdk.runs.join(thread_id, run_id), PATIENCE)
        assert isinstance(final, dict) and final["step"] == "generate"
        assert lost == [run_id]
        turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=run_id))).turn
        assert turn.state == turns_pb2.TURN_STATE_DONE
        # No crash charged and nothing rewound; the claim of the turn offered again
        # is its one new attempt (the fence of a late copy of the lost hand-off).
        assert (turn.crashes_charged, turn.rewinds, turn.attempts) == (0, 0, 1)
