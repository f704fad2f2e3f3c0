"""The panel's rules on a parked run, and a status check that cannot confirm.

The contract's panel approves a run parked at ``interrupt()`` (``resume``), resumes
it with ``submit(None)`` (its resume call: ``interrupt()`` returns None), and when
it cannot learn a run's outcome says so plainly. A real bridge in-process runs a
graph that parks, against a real service and a real nats-server; the session talks
to it through the production NATS transport and follower.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from nats.aio.client import Client
from turnkeeper.agent.bridge import Bridge
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.follower import Event, FollowOptions, Frame
from turnkeeper.panel.session import AgentSession, ErrorKind
from turnkeeper.states import TurnState
from turnkeeper_server.app import TurnkeeperServer

from tests.support.bridges import bridge_config
from tests.support.nats import NatsServer

pytestmark = pytest.mark.timeout(60)

AGENT = "approver"
FOLLOW = FollowOptions(idle_gap=0.2, call_timeout=1.0, reconnect_initial=0.02, deadline=30.0)


class State(TypedDict):
    order: str
    answer: Any


def build() -> StateGraph[Any, Any, Any, Any]:
    def prepare(state: State) -> dict[str, Any]:
        return {"order": state["order"].upper()}

    def approve(state: State) -> dict[str, Any]:
        return {"answer": interrupt({"approve": state["order"]})}

    builder = StateGraph(State)
    builder.add_node("prepare", prepare)
    builder.add_node("approve", approve)
    builder.add_edge(START, "prepare")
    builder.add_edge("prepare", "approve")
    builder.add_edge("approve", END)
    return builder


@dataclasses.dataclass
class Panel:
    """A session and what its UI saw: the moment the run parked."""

    session: AgentSession
    parked: asyncio.Event

    async def until_parked(self) -> None:
        await asyncio.wait_for(self.parked.wait(), 30)

    def final_output(self) -> Any:
        finals = [
            e.data
            for e in self.session.transcript.events
            if isinstance(e, Event) and e.type == "final"
        ]
        assert len(finals) == 1, self.session.transcript.events
        return finals[0]["output"]


@pytest.fixture
async def bridge(service: TurnkeeperServer, nats_server: NatsServer) -> AsyncIterator[Bridge]:
    config = bridge_config(AGENT, service.address, nats_server.url, "approver-1")
    async with Bridge(build(), config) as running:
        await running.wait_subscribed()
        yield running


def panel(nc: Client, client: AsyncTurnkeeperClient, options: FollowOptions = FOLLOW) -> Panel:
    parked = asyncio.Event()

    def on_frame(frame: Frame) -> None:
        if isinstance(frame, Event) and frame.type == "interrupt":
            parked.set()

    transport = NatsAgentTransport(nc, AGENT, client=client, timeout=5.0, follow_options=options)
    return Panel(AgentSession(transport, on_frame=on_frame), parked)


@pytest.mark.usefixtures("bridge")
async def test_resume_approves_a_parked_run_from_the_panel(
    nc: Client, client: AsyncTurnkeeperClient
) -> None:
    p = panel(nc, client)
    assert await p.session.submit({"order": "two chairs", "answer": None})
    await p.until_parked()
    assert p.session.state is TurnState.PARKED
    assert (await p.session.check_status()).state is TurnState.PARKED

    assert await p.session.resume({"approved": True})
    await p.session.join()
    assert (p.session.state, p.session.error) == (TurnState.DONE, None)
    assert p.final_output() == {"order": "TWO CHAIRS", "answer": {"approved": True}}


@pytest.mark.usefixtures("bridge")
async def test_submit_none_resumes_a_run_parked_at_interrupt_while_it_is_followed(
    nc: Client, client: AsyncTurnkeeperClient
) -> None:
    p = panel(nc, client)
    assert await p.session.submit({"order": "a lamp", "answer": "unset"})
    await p.until_parked()
    turn_id = p.session.turn_id

    # Not refused as busy: the contract's resume call, and interrupt() returns None.
    assert await p.session.submit(None)
    await p.session.join()
    assert (p.session.turn_id, p.session.state, p.session.error) == (
        turn_id,
        TurnState.DONE,
        None,
    )
    assert p.final_output() == {"order": "A LAMP", "answer": None}


@pytest.mark.usefixtures("bridge")
async def test_submit_none_resumes_a_parked_run_the_panel_stopped_following(
    nc: Client, client: AsyncTurnkeeperClient
) -> None:
    p = panel(nc, client)
    assert await p.session.submit({"order": "a rug", "answer": "unset"})
    await p.until_parked()
    await p.session.aclose()  # the panel was closed while the run waited
    assert not p.session.running

    assert await p.session.submit(None)
    await p.session.join()
    assert (p.session.state, p.session.error) == (TurnState.DONE, None)


async def test_check_status_says_plainly_when_it_cannot_confirm_the_outcome(
    bridge: Bridge, nc: Client, client: AsyncTurnkeeperClient
) -> None:
    p = panel(nc, client)
    nothing = await p.session.check_status()
    assert not nothing.confirmed and nothing.state is None
    assert "no run" in nothing.message

    assert await p.session.submit({"order": "a desk", "answer": None})
    await p.until_parked()
    await p.session.aclose()
    seen = await p.session.check_status()
    assert seen.confirmed and seen.state is TurnState.PARKED
    assert seen.message == f"run {p.session.turn_id} is parked"

    # No agent answers any more: the session cannot learn the outcome, and says so.
    await bridge.shutdown()
    unconfirmed = await p.session.check_status()
    assert not unconfirmed.confirmed and unconfirmed.status is None
    assert unconfirmed.message.startswith(
        f"the outcome of run {p.session.turn_id} could not be confirmed"
    )
    # Read-only: the state last learned stays, and no error is invented or cleared.
    assert p.session.state is TurnState.PARKED
    assert p.session.error is None or p.session.error.kind is not ErrorKind.FAILED


@pytest.mark.usefixtures("bridge")
async def test_an_interrupted_follow_keeps_the_pending_approval_shown(
    nc: Client, client: AsyncTurnkeeperClient
) -> None:
    # The follow gives up (its deadline) while the run waits PARKED for a person.
    p = panel(nc, client, dataclasses.replace(FOLLOW, deadline=1.0))
    assert await p.session.submit({"order": "a sofa", "answer": None})
    await p.until_parked()
    await p.session.join()
    assert p.session.error is not None and p.session.error.kind is ErrorKind.INTERRUPTED
    # What the panel showed stays: the steps before, the approval it asks for, and
    # the run's state.
    types = [e.type for e in p.session.transcript.events if isinstance(e, Event)]
    assert "interrupt" in types and types.index("interrupt") > 0, types
    assert p.session.state is TurnState.PARKED
    # And it can still be answered.
    assert await p.session.resume({"approved": True})
    await p.session.join()
    assert outcome(p.session) == (TurnState.DONE, None)


def outcome(session: AgentSession) -> tuple[TurnState | None, object]:
    """(state, error), read through a call: no narrowing carried over an await."""
    return session.state, session.error


def build_twice() -> StateGraph[Any, Any, Any, Any]:
    """Asks twice: an approval, then a confirmation."""

    def approve(state: State) -> dict[str, Any]:
        return {"answer": interrupt({"approve": state["order"]})}

    def confirm(state: State) -> dict[str, Any]:
        return {"order": f"{state['order']} ({interrupt({'confirm': state['answer']})})"}

    builder = StateGraph(State)
    builder.add_node("approve", approve)
    builder.add_node("confirm", confirm)
    builder.add_edge(START, "approve")
    builder.add_edge("approve", "confirm")
    builder.add_edge("confirm", END)
    return builder


async def test_a_second_interrupt_shown_before_the_resumes_answer_stays_shown(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    nc: Client,
    client: AsyncTurnkeeperClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The resume's answer travels panel -> agent -> service -> agent -> panel; the
    # resumed run's next interrupt comes on the event stream and can be shown first.
    # The answer then says nothing newer than the stream did: the run stays parked
    # (decision 640, as on the chat page), where the session said "running".
    config = bridge_config("asks-twice", service.address, nats_server.url, "asks-twice-1")
    async with Bridge(build_twice(), config) as running:
        await running.wait_subscribed()
        interrupts: asyncio.Queue[Event] = asyncio.Queue()

        def on_frame(frame: Frame) -> None:
            if isinstance(frame, Event) and frame.type == "interrupt":
                interrupts.put_nowait(frame)

        transport = NatsAgentTransport(
            nc, "asks-twice", client=client, timeout=5.0, follow_options=FOLLOW
        )
        answer = transport.resume

        async def answered_after_the_next_interrupt(turn_id: str, value: Any) -> None:
            await answer(turn_id, value)
            await asyncio.wait_for(interrupts.get(), 30)  # shown before this answer
            monkeypatch.setattr(transport, "resume", answer)  # the next one as it comes

        monkeypatch.setattr(transport, "resume", answered_after_the_next_interrupt)
        session = AgentSession(transport, on_frame=on_frame)
        assert await session.submit({"order": "a desk", "answer": None})
        await asyncio.wait_for(interrupts.get(), 30)
        assert session.state is TurnState.PARKED
        assert await session.resume("yes")
        assert outcome(session) == (TurnState.PARKED, None)
        # And the second interrupt is answered as the first was.
        assert await session.resume("sure")
        await session.join()
        assert outcome(session) == (TurnState.DONE, None)
