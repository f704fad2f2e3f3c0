"""The status words on the NATS JSON-RPC wire are the contract's lower-case ones.

A panel written to the contract compares ``responses/turnStatus``'s status with
``running``; an upper-case word would look like no live turn at all, and the panel
would take a live turn's first idle gap for its end. A real bridge in-process, a
real service and a real nats-server; the session client's transport reads the same
words back. (gRPC's TurnStatus keeps its enum names: test_turn_states.py.)
"""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from nats.aio.client import Client
from turnkeeper.agent.bridge import Bridge
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.follower import TurnFollower
from turnkeeper.states import TurnState
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import result
from tests.support.bridges import bridge_config
from tests.support.contract_panel import KEEP_WAITING, ContractPanel
from tests.support.nats import NatsServer

pytestmark = pytest.mark.timeout(60)

AGENT = "words"


class State(TypedDict):
    steps: list[str]


def build(release: asyncio.Event, entered: asyncio.Event) -> StateGraph[Any, Any, Any, Any]:
    async def work(state: State) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return {"steps": [*state["steps"], "work"]}

    def ask(state: State) -> dict[str, Any]:
        answer = interrupt("approve?")
        return {"steps": [*state["steps"], f"ask={answer}"]}

    builder = StateGraph(State)
    builder.add_node("work", work)
    builder.add_node("ask", ask)
    builder.add_edge(START, "work")
    builder.add_edge("work", "ask")
    builder.add_edge("ask", END)
    return builder


async def state_of(client: AsyncTurnkeeperClient, turn_id: str) -> int:
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
    return int(status.state)


async def until_state(client: AsyncTurnkeeperClient, turn_id: str, state: int) -> None:
    """Follow the turn until the service reports ``state`` (a park or the end)."""
    async with TurnFollower(client, turn_id) as follower:
        async for _ in follower:
            if await state_of(client, turn_id) == state:
                return
    assert await state_of(client, turn_id) == state


async def test_turn_status_and_resume_answer_the_contracts_lower_case_words(
    service: TurnkeeperServer, nats_server: NatsServer, nc: Client, client: AsyncTurnkeeperClient
) -> None:
    release, entered = asyncio.Event(), asyncio.Event()
    config = bridge_config(AGENT, service.address, nats_server.url, "words-1")
    transport = NatsAgentTransport(nc, AGENT, client=client)
    async with Bridge(build(release, entered), config) as bridge:
        await bridge.wait_subscribed()
        created = await result(
            nc,
            "responses/create",
            {"input": {"steps": []}, "turn_id": "t-w", "thread_id": "th-w", "background": True},
            agent=AGENT,
        )
        assert created["status"] == "in_progress"
        await entered.wait()

        status = await result(nc, "responses/turnStatus", {"turn_id": "t-w"}, agent=AGENT)
        assert status["status"] == "running"
        # The session client reads the word as the live state it is.
        assert (await transport.turn_status("t-w")).state is TurnState.RUNNING

        release.set()
        await until_state(client, "t-w", turns_pb2.TURN_STATE_PARKED)
        status = await result(nc, "responses/turnStatus", {"turn_id": "t-w"}, agent=AGENT)
        assert status["status"] == "parked"
        assert (await transport.turn_status("t-w")).state is TurnState.PARKED

        resumed = await result(
            nc, "responses/resumeDetached", {"turn_id": "t-w", "resume": "yes"}, agent=AGENT
        )
        assert resumed["status"] == "running"
        await until_state(client, "t-w", turns_pb2.TURN_STATE_DONE)
        status = await result(nc, "responses/turnStatus", {"turn_id": "t-w"}, agent=AGENT)
        assert status["status"] == "done"
        assert (await transport.turn_status("t-w")).state is TurnState.DONE

        never = await result(nc, "responses/turnStatus", {"turn_id": "never"}, agent=AGENT)
        assert never["status"] == "unknown"
        assert (await transport.turn_status("never")).state is TurnState.UNKNOWN


def test_one_table_maps_every_state_to_its_wire_word_and_back() -> None:
    words = {state: state.word for state in TurnState}
    assert words == {
        TurnState.RUNNING: "running",
        TurnState.PARKED: "parked",
        TurnState.DONE: "done",
        TurnState.FAILED: "failed",
        TurnState.CANCELLED: "cancelled",
        TurnState.QUEUED: "queued",
        TurnState.UNKNOWN: "unknown",
    }
    assert all(TurnState.from_wire(word) is state for state, word in words.items())
    # Words outside the contract (the responses/create words, garbage) are UNKNOWN,
    # which a panel treats as over, never as live.
    assert TurnState.from_wire("in_progress") is TurnState.UNKNOWN
    assert TurnState.from_wire(None) is TurnState.UNKNOWN


async def test_a_queued_turn_keeps_a_five_word_panel_waiting_and_cancelled_concludes_it(
    service: TurnkeeperServer, nats_server: NatsServer, nc: Client, client: AsyncTurnkeeperClient
) -> None:
    release, entered = asyncio.Event(), asyncio.Event()
    config = bridge_config(AGENT, service.address, nats_server.url, "words-q")
    transport = NatsAgentTransport(nc, AGENT, client=client)
    async with Bridge(build(release, entered), config) as bridge:
        await bridge.wait_subscribed()
        await result(
            nc,
            "responses/create",
            {"input": {"steps": []}, "turn_id": "t-live", "thread_id": "th-q", "background": True},
            agent=AGENT,
        )
        await entered.wait()
        # A second turn on the busy thread waits QUEUED behind the first: it will run.
        queued = await result(
            nc,
            "responses/create",
            {
                "input": {"steps": []},
                "turn_id": "t-queued",
                "thread_id": "th-q",
                "background": True,
                "multitask_strategy": "enqueue",
            },
            agent=AGENT,
        )
        assert queued["status"] == "queued"  # responses/create's own (OpenAI) words
        panel = ContractPanel(nc, AGENT, "t-queued")
        try:
            await panel.polled(3)
            # A panel that knows only the five words keeps waiting on a queued turn.
            assert panel.concluded is None, panel.words
            assert set(panel.words) == {"running"}
            # The finer state is beside it, for clients that know it.
            assert {a["state"] for a in panel.answers} == {"queued"}
            assert (await transport.turn_status("t-queued")).state is TurnState.QUEUED

            await result(nc, "responses/cancel", {"turn_id": "t-queued"}, agent=AGENT)
            # Cancelled is not a word it waits on: it concludes, as it should.
            assert await panel.conclusion() == "cancelled"
            assert panel.answers[-1]["state"] == "cancelled"
            assert (await transport.turn_status("t-queued")).state is TurnState.CANCELLED
        finally:
            await panel.close()
        release.set()
        await until_state(client, "t-live", turns_pb2.TURN_STATE_PARKED)
        status = await result(nc, "responses/turnStatus", {"turn_id": "t-live"}, agent=AGENT)
        assert (status["status"], status["state"]) == ("parked", "parked")
        resumed = await result(
            nc, "responses/resumeDetached", {"turn_id": "t-live", "resume": "no"}, agent=AGENT
        )
        assert (resumed["status"], resumed["state"]) == ("running", "running")
        await until_state(client, "t-live", turns_pb2.TURN_STATE_DONE)


def test_the_contract_word_of_every_state_is_one_a_five_word_panel_reads_right() -> None:
    assert {state: state.contract_word for state in TurnState} == {
        TurnState.RUNNING: "running",
        TurnState.PARKED: "parked",
        TurnState.DONE: "done",
        TurnState.FAILED: "failed",
        TurnState.CANCELLED: "cancelled",  # not one of the five: a panel concludes
        TurnState.QUEUED: "running",  # it will run: a panel keeps waiting
        TurnState.UNKNOWN: "unknown",
    }
    for state in TurnState:
        assert (state.contract_word in KEEP_WAITING) is state.live
