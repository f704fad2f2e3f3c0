"""``responses/create`` without new input, through the real bridge (in-process, a real
service and nats-server): ``regenerate: true`` re-runs the thread's latest input from
the entry node, ``input: null`` continues pending work or answers that there is none,
and both intents survive a turn that died before its first checkpoint. The session
client (turnkeeper.panel.session) drives the bridge the way a panel would."""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

import nats
import pytest
from langgraph.graph import END, START, StateGraph
from nats.aio.client import Client
from turnkeeper._values import value_to_py
from turnkeeper.agent.bridge import Bridge
from turnkeeper.agent.bridge._intent import REGENERATE_INPUT, thread_config
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.follower import Event, FollowOptions, TurnState
from turnkeeper.panel.session import AgentSession, ErrorKind, SessionError
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Panel, rpc
from tests.support.bridges import bridge_config
from tests.support.nats import NatsServer
from tests.support.turns import value

pytestmark = pytest.mark.timeout(60)

AGENT = "regen"
NODES = ["understand", "answer"]
FOLLOW = FollowOptions(idle_gap=0.2, call_timeout=1.0, reconnect_initial=0.02, deadline=30.0)


class State(TypedDict):
    question: str
    topic: str
    answers: Annotated[list[str], operator.add]


@dataclass
class Counting:
    """The graph's side effects, counted: which node ran, in order."""

    ran: list[str] = field(default_factory=list)
    # Nodes that raise the next time they run.
    fail_once: set[str] = field(default_factory=set)

    def build(self) -> StateGraph[Any, Any, Any, Any]:
        def understand(state: State) -> dict[str, Any]:
            self.ran.append("understand")
            return {"topic": state["question"].upper()}

        def answer(state: State) -> dict[str, Any]:
            self.ran.append("answer")
            if "answer" in self.fail_once:
                self.fail_once.discard("answer")
                raise RuntimeError("the model is down")
            # Numbered by run, so a regenerated answer differs from the one it replaces.
            return {"answers": [f"{state['topic']} #{self.ran.count('answer')}"]}

        builder = StateGraph(State)
        builder.add_node("understand", understand)
        builder.add_node("answer", answer)
        builder.add_edge(START, "understand")
        builder.add_edge("understand", "answer")
        builder.add_edge("answer", END)
        return builder


@dataclass
class Stack:
    graph: Counting
    bridge: Bridge
    nc: Client
    client: AsyncTurnkeeperClient

    def session(self, **kwargs: Any) -> AgentSession:
        transport = NatsAgentTransport(
            self.nc, AGENT, client=self.client, timeout=10.0, follow_options=FOLLOW
        )
        return AgentSession(transport, **kwargs)

    async def create(self, params: dict[str, Any]) -> dict[str, Any]:
        return await rpc(
            self.nc, "responses/create", params | {"background": True}, agent=AGENT, timeout=10
        )

    async def answers(self, thread_id: str) -> list[str]:
        state = await self.bridge.graph.aget_state(thread_config(thread_id))
        return list(state.values["answers"])


@pytest.fixture
async def stack(
    service: TurnkeeperServer, nats_server: NatsServer, client: AsyncTurnkeeperClient
) -> AsyncIterator[Stack]:
    graph = Counting()
    nc = await nats.connect(nats_server.url)
    try:
        async with Bridge(
            graph.build(), bridge_config(AGENT, service.address, nats_server.url, "r-regen")
        ) as bridge:
            await bridge.wait_subscribed()
            yield Stack(graph, bridge, nc, client)
    finally:
        await nc.close()


def outcome(session: AgentSession) -> tuple[TurnState | None, SessionError | None]:
    return session.state, session.error


def steps_of(session: AgentSession) -> list[str]:
    return [
        e.data["node"]
        for e in session.transcript.events
        if isinstance(e, Event) and e.type == "step"
    ]


def final_answers(session: AgentSession) -> list[str]:
    [final] = [e.data for e in session.transcript.events if e.type == "final"]
    return list(final["output"]["answers"])


async def ended(client: AsyncTurnkeeperClient, turn_id: str) -> list[tuple[int, str, Any]]:
    panel = Panel()
    panel.start(client, turn_id)
    return await panel.ended()


async def test_session_regenerate_reruns_the_latest_question_from_the_entry_node(
    stack: Stack,
) -> None:
    session = stack.session()
    for question in ("what is a turn", "why does it matter"):
        assert await session.submit({"question": question}), session.error
        await session.join()
        assert outcome(session) == (TurnState.DONE, None)
    assert stack.graph.ran == NODES * 2
    first_answer = "WHAT IS A TURN #1"
    assert await stack.answers(session.thread_id) == [first_answer, "WHY DOES IT MATTER #2"]
    before = session.turn_id

    assert await session.regenerate(), session.error
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert session.turn_id not in (before, None)
    # The entry node ran again, then the rest, for the newest question; the old
    # answer is off the thread's line, the first exchange untouched.
    assert stack.graph.ran == NODES * 3
    assert steps_of(session) == NODES
    assert final_answers(session) == [first_answer, "WHY DOES IT MATTER #3"]
    assert await stack.answers(session.thread_id) == [first_answer, "WHY DOES IT MATTER #3"]
    # The intent is in the journal, as the turn's input.
    assert session.turn_id is not None
    turn = (await stack.client.get_turn(turns_pb2.GetTurnRequest(turn_id=session.turn_id))).turn
    assert value_to_py(turn.input) == REGENERATE_INPUT

    # Again: still from the same entry (the fork the first regenerate made is not
    # taken for a run's input).
    assert await session.regenerate()
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert stack.graph.ran == NODES * 4
    assert await stack.answers(session.thread_id) == [first_answer, "WHY DOES IT MATTER #4"]
    # The last payload is still the question, for a retry.
    assert session.last_payload == {"question": "why does it matter"}


async def test_regenerate_without_a_run_is_refused_and_bad_params_are_errors(
    stack: Stack,
) -> None:
    session = stack.session()
    assert not await session.regenerate()
    assert session.error is not None and session.error.kind is ErrorKind.REJECTED
    assert "no run to regenerate" in session.error.message
    assert not session.error.retryable and not await session.retry()

    refused = await stack.create({"input": None, "regenerate": True, "thread_id": "th-empty"})
    assert refused["error"]["code"] == -32000
    assert refused["error"]["data"]["code"] == "FAILED_PRECONDITION"
    for params in (
        {"input": {"question": "x"}, "regenerate": True, "thread_id": "th-x"},
        {"input": None, "regenerate": "yes", "thread_id": "th-x"},
        {"input": None},  # continuing needs a thread
        {"input": {"__turnkeeper__": "regenerate"}, "thread_id": "th-x"},  # reserved
    ):
        answer = await stack.create(params)
        assert answer["error"]["code"] == -32602, (params, answer)
    assert stack.graph.ran == []
    assert stack.bridge.runtime.active == 0


async def test_input_null_with_nothing_pending_starts_no_turn(stack: Stack) -> None:
    session = stack.session()
    assert await session.submit({"question": "done soon"})
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    ran = list(stack.graph.ran)

    for thread_id in (session.thread_id, "th-never-used"):
        answer = await stack.create({"input": None, "thread_id": thread_id, "turn_id": "t-none"})
        assert answer["result"] == {"turn_id": None, "thread_id": thread_id, "status": "completed"}
    status = await stack.client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-none"))
    assert status.state == turns_pb2.TURN_STATE_UNKNOWN
    # A session that knows nothing of the thread asks; there is nothing to run.
    other = stack.session(thread_id=session.thread_id)
    assert not await other.submit(None)
    assert (other.turn_id, other.error) == (None, None)
    assert stack.graph.ran == ran
    assert stack.bridge.runtime.active == 0


async def test_input_null_continues_a_crashed_thread_as_a_new_turn(stack: Stack) -> None:
    stack.graph.fail_once.add("answer")
    session = stack.session()
    assert await session.submit({"question": "flaky"})
    await session.join()
    assert session.state is TurnState.FAILED
    assert session.error is not None and session.error.kind is ErrorKind.FAILED
    assert steps_of(session) == ["understand"]
    failed_turn = session.turn_id

    # Pending: answer. A new turn runs it, not the entry node again.
    assert await session.submit(None), session.error
    await session.join()
    assert outcome(session) == (TurnState.DONE, None)
    assert session.turn_id not in (failed_turn, None)
    assert steps_of(session) == ["answer"]
    assert final_answers(session) == ["FLAKY #2"]
    assert stack.graph.ran == ["understand", "answer", "answer"]
    assert session.turn_id is not None
    turn = (await stack.client.get_turn(turns_pb2.GetTurnRequest(turn_id=session.turn_id))).turn
    assert value_to_py(turn.input) is None

    # The same request again answers for the turn it started, and runs nothing.
    again = await stack.create(
        {"input": None, "thread_id": session.thread_id, "turn_id": session.turn_id}
    )
    assert again["result"] == {
        "turn_id": session.turn_id,
        "thread_id": session.thread_id,
        "status": "completed",
    }
    # Now nothing is pending.
    assert not await session.submit(None)
    fresh = await stack.create({"input": None, "thread_id": session.thread_id})
    assert fresh["result"]["turn_id"] is None
    assert stack.graph.ran == ["understand", "answer", "answer"]


async def test_intents_survive_a_turn_that_died_before_its_first_checkpoint(
    service: TurnkeeperServer, nats_server: NatsServer, client: AsyncTurnkeeperClient
) -> None:
    graph = Counting()
    nc = await nats.connect(nats_server.url)
    base = bridge_config(AGENT, service.address, nats_server.url, "r-early")
    try:
        # A first process answers a question on one thread and fails half-way on another.
        async with Bridge(graph.build(), base) as bridge:
            await bridge.wait_subscribed()
            for thread_id, question in (("th-regen", "first"), ("th-cont", "second")):
                graph.fail_once = {"answer"} if thread_id == "th-cont" else set()
                created = await rpc(
                    nc,
                    "responses/create",
                    {"input": {"question": question}, "thread_id": thread_id, "background": True},
                    agent=AGENT,
                )
                await ended(client, created["result"]["turn_id"])
        assert graph.ran == ["understand", "answer", "understand", "answer"]

        # Another process of the replica journaled a regenerate and a continuation,
        # then died before either wrote a checkpoint.
        for turn_id, thread_id, journaled in (
            ("t-regen", "th-regen", REGENERATE_INPUT),
            ("t-cont", "th-cont", None),
        ):
            await client.start_turn(
                turns_pb2.StartTurnRequest(
                    turn_id=turn_id,
                    thread_id=thread_id,
                    agent=AGENT,
                    input=value(journaled),
                    replica="r-early",
                    incarnation="died-before-its-first-checkpoint",
                )
            )
        graph.ran.clear()

        # The next process re-drives both from their journaled inputs.
        async with Bridge(graph.build(), dataclasses.replace(base, incarnation="next")):
            regenerated = await ended(client, "t-regen")
            continued = await ended(client, "t-cont")
    finally:
        await nc.close()

    assert [(t, d.get("node")) for _, t, d in regenerated][:2] == [
        ("step", "understand"),
        ("step", "answer"),
    ]
    # (The two run side by side: which one's answer is numbered first varies.)
    assert [a.split(" #")[0] for a in regenerated[-2][2]["output"]["answers"]] == ["FIRST"]
    assert [(t, d.get("node")) for _, t, d in continued][:1] == [("step", "answer")]
    assert [a.split(" #")[0] for a in continued[-2][2]["output"]["answers"]] == ["SECOND"]
    assert [t for _, t, _ in continued][-2:] == ["final", "turn.done"]
    assert sorted(graph.ran) == ["answer", "answer", "understand"]
    for turn_id in ("t-regen", "t-cont"):
        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
        assert (status.state, status.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
