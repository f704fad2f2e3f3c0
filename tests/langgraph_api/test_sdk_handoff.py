"""A run starts in one message (decision 370): the service journals its turn and hands
it to a replica, so the run's answer does not wait for an agent. A replica that got
the hand-off and died before claiming it (stopped, then SIGKILLed) leaves the turn
RUNNING and owned by nobody, `pending` to the SDK; the next replica of the graph
takes it (its startup Redrive) and the run completes, no attempt spent: nothing ran."""

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
from tests.support.langgraph_host import hosts_for
from tests.support.nats import NatsServer

ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "who takes it?"}]}


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
        # Handed out again, never re-driven: nothing had run.
        assert status.attempts == 0
        assert (await sdk.runs.get(thread_id, run_id))["status"] == "success"
