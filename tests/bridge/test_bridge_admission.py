"""Admission (agent/bridge/_admission.py): a replica runs at most ``max_turns`` turns
at once; a turn past it waits where it can be seen (unowned, Turn.detail says why, the
LangGraph API says `pending`) and starts when a slot frees, never dropped or failed."""

from __future__ import annotations

import asyncio
from typing import Any, TypedDict, cast

import grpc
import pytest
from langgraph.graph import END, START, StateGraph
from nats.aio.client import Client
from turnkeeper.agent.bridge import Bridge, BridgeConfig
from turnkeeper.agent.bridge._admission import DEFAULT_MAX_TURNS, Admission
from turnkeeper.agent.bridge._boundary import BoundarySaver
from turnkeeper.agent.bridge._runtime import Assignment, Execution, Identity, TurnRuntime
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import WrongState
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.web.langgraph import shapes

from tests.support.agents import Panel, result
from tests.support.bridges import bridge_config
from tests.support.nats import NatsServer
from tests.support.service import announced

pytestmark = [pytest.mark.timeout(120)]

AGENT = "gated"


class State(TypedDict):
    text: str


class Gates:
    """Each turn's node waits for its gate (keyed by the turn's text)."""

    def __init__(self) -> None:
        self.entered: dict[str, asyncio.Event] = {}
        self.open: dict[str, asyncio.Event] = {}

    def of(self, key: str) -> tuple[asyncio.Event, asyncio.Event]:
        return self.entered.setdefault(key, asyncio.Event()), self.open.setdefault(
            key, asyncio.Event()
        )

    def graph(self) -> StateGraph[Any, Any, Any, Any]:
        async def gate(state: State) -> dict[str, Any]:
            entered, opened = self.of(state["text"])
            entered.set()
            await opened.wait()
            return {"text": state["text"] + " done"}

        builder = StateGraph(State)
        builder.add_node("gate", gate)
        builder.add_edge(START, "gate")
        builder.add_edge("gate", END)
        return builder


async def create(nc: Client, text: str) -> dict[str, Any]:
    params = {"input": {"text": text}, "turn_id": text, "background": True}
    created: dict[str, Any] = await result(nc, "responses/create", params, agent=AGENT)
    return created


async def test_a_turn_past_the_limit_waits_visibly_and_runs_when_a_slot_frees(
    service: TurnkeeperServer, nats_server: NatsServer, nc: Client
) -> None:
    gates = Gates()
    config = bridge_config(AGENT, service.address, nats_server.url, "gated-1", max_turns=1)
    client = AsyncTurnkeeperClient(ConnectionOptions(target=service.address))
    try:
        async with Bridge(gates.graph(), config) as bridge:
            await bridge.wait_subscribed()
            assert (await create(nc, "first"))["status"] == "in_progress"
            await asyncio.wait_for(gates.of("first")[0].wait(), 30)

            # Past the limit: journaled, not refused, and nobody runs it yet.
            assert (await create(nc, "second"))["status"] == "queued"
            second = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="second"))).turn
            assert second.state == turns_pb2.TURN_STATE_RUNNING
            assert not second.HasField("owner")

            await announced(service, lambda: bool(service.engine.directory.full(AGENT)))
            status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="second"))
            assert "waits for a free slot" in status.detail, status
            assert "--max-turns 1" in status.detail
            record = service.engine.turns.get("second")
            assert record is not None and shapes.run_status(record) == "pending"
            assert not gates.of("second")[0].is_set()

            gates.of("first")[1].set()
            await asyncio.wait_for(gates.of("second")[0].wait(), 30)
            running = service.engine.turns.get("second")
            assert running is not None and running.owner_replica == "gated-1"
            assert shapes.run_status(running) == "running"
            gates.of("second")[1].set()
            panel = Panel()
            panel.start(client, "second")
            await panel.ended(timeout=30)
            for turn_id in ("first", "second"):
                done = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
                # Neither re-driven nor failed for waiting.
                assert (done.state, done.attempts) == (turns_pb2.TURN_STATE_DONE, 0), done
            await announced(service, lambda: not service.engine.directory.full(AGENT))
    finally:
        await client.close()


async def test_slots_go_to_owned_turns_first_then_to_claims_in_order() -> None:
    admission = Admission(1)
    claimed: list[str] = []
    admission.on_claim = lambda turn_id, attempt, reason: claimed.append(turn_id)
    flips: list[bool] = []
    admission.on_full = flips.append
    assert admission.try_take()
    assert not admission.try_take()
    admission.wait_to_claim("a", 0, "create")
    admission.wait_to_claim("b", 0, "create")
    owned = asyncio.create_task(admission.take())
    await asyncio.sleep(0)
    admission.give_back()  # to the owned execution, before any claim
    await owned
    assert claimed == []
    admission.give_back()
    assert claimed == ["a"]
    admission.give_back()
    assert claimed == ["a", "b"]
    admission.give_back()
    assert admission.in_use == 0
    assert flips == [True, False]


async def test_a_cancelled_wait_passes_its_slot_on() -> None:
    admission = Admission(1)
    assert admission.try_take()
    first = asyncio.create_task(admission.take())
    second = asyncio.create_task(admission.take())
    await asyncio.sleep(0)
    first.cancel()
    admission.give_back()
    await second
    assert first.cancelled()
    assert admission.in_use == 1


def test_the_limit_is_read_from_the_environment_and_checked() -> None:
    assert BridgeConfig(agent="a").max_turns == DEFAULT_MAX_TURNS
    env = {"TURNKEEPER_MAX_TURNS": "3"}
    assert BridgeConfig.from_env("a", env).max_turns == 3
    with pytest.raises(ValueError, match="TURNKEEPER_MAX_TURNS='many'"):
        BridgeConfig.from_env("a", {"TURNKEEPER_MAX_TURNS": "many"})
    with pytest.raises(ValueError, match="0 \\(no limit\\) or more"):
        BridgeConfig(agent="a", max_turns=-1)


class _StoppedWhileClaiming:
    """ClaimTurn answered as the service answers it, while the bridge begins to stop
    (SIGTERM lands during the call): start() then refuses the turn."""

    def __init__(self) -> None:
        self.options = ConnectionOptions(target="127.0.0.1:1")
        self.runtime: TurnRuntime | None = None

    async def claim_turn(self, request: turns_pb2.ClaimTurnRequest) -> turns_pb2.ClaimTurnResponse:
        assert self.runtime is not None
        self.runtime._stopping = True
        turn = turns_pb2.Turn(turn_id=request.turn_id, attempts=request.attempt)
        return turns_pb2.ClaimTurnResponse(turn=turn)


async def test_a_claim_that_does_not_start_gives_its_slot_back_once() -> None:
    client = _StoppedWhileClaiming()
    runtime = TurnRuntime(
        Gates().graph().compile(),
        cast(AsyncTurnkeeperClient, client),
        cast(BoundarySaver, None),
        Identity(agent=AGENT, replica="gated-1", incarnation="i1"),
        input_mapper=lambda value: value,
        max_turns=2,
    )
    client.runtime = runtime
    assert runtime.admission.try_take()  # a turn that runs
    assert runtime.admission.try_take()  # the claim's slot
    await runtime._claim("claimed", 0, "create")
    # One slot given back (start's); twice would let a third turn past a limit of 2.
    assert runtime.admission.in_use == 1
    with pytest.raises(RuntimeError, match="never taken"):
        Admission(1).give_back()


class _ClaimsSeen:
    """ClaimTurn recorded with whether the parked attempt's task had ended by then;
    refused (the test runs no graph)."""

    def __init__(self) -> None:
        self.options = ConnectionOptions(target="127.0.0.1:1")
        self.parked: Execution | None = None
        self.claims: list[tuple[str, int, bool]] = []

    async def claim_turn(self, request: turns_pb2.ClaimTurnRequest) -> turns_pb2.ClaimTurnResponse:
        assert self.parked is not None
        self.claims.append((request.turn_id, request.attempt, self.parked.done))
        raise WrongState(grpc.StatusCode.FAILED_PRECONDITION, "refused by the test")


async def test_a_resume_handed_out_while_the_parked_attempt_ends_is_claimed_after_it() -> None:
    # ResumeDetached keeps the attempt: the hand-off names the attempt whose task
    # (ParkTurn committed) may still be ending on a loaded loop. It is claimed once
    # that task ends, not taken for "runs here already" and left to the reaper
    # (decision 560).
    client = _ClaimsSeen()
    runtime = TurnRuntime(
        Gates().graph().compile(),
        cast(AsyncTurnkeeperClient, client),
        cast(BoundarySaver, None),
        Identity(agent=AGENT, replica="gated-1", incarnation="i1"),
        input_mapper=lambda value: value,
    )
    turn = turns_pb2.Turn(turn_id="parked", attempts=3)
    parked = Execution(runtime, Assignment(turn, "", "create"))
    client.parked = parked
    ending = asyncio.Event()

    async def ends() -> None:
        await ending.wait()

    parked.task = asyncio.create_task(ends())
    runtime._executions["parked"] = parked

    # Still running its graph: a hand-off of the same attempt is one it runs already.
    await runtime.claim("parked", 3, "lease-expired")
    assert client.claims == []

    await parked._stop_heartbeat()  # what _park does before ParkTurn
    claim = asyncio.create_task(runtime.claim("parked", 3, "resume"))
    await asyncio.sleep(0)  # one turn of the loop: the claim is under way, not dropped
    assert not claim.done() and client.claims == []
    ending.set()
    await claim
    assert client.claims == [("parked", 3, True)]
    assert runtime.admission.in_use == 0  # the refused claim gave its slot back
