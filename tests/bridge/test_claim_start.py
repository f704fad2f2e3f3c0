"""The start's round trips (decision 480): ClaimTurn says whether the turn's thread has
no root checkpoint, read in the claim's own transaction, and the bridge answers its
graph's first read of the thread's latest checkpoint from that, without asking; and
sends the input checkpoint of such a thread with its first step's frame (decision 530)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, TypedDict
from uuid import uuid4

import pytest
from google.protobuf import struct_pb2
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.graph import START, StateGraph
from turnkeeper.agent.bridge._boundary import BoundarySaver
from turnkeeper.agent.bridge._events import EventLog
from turnkeeper.agent.bridge._runtime import Execution, Identity, TurnRuntime
from turnkeeper.agent.saver import RemoteSaver, durable_config
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.streams import keep_frames

# The turns here are claimed and written by the test itself: no agent renews their lease.
pytestmark = [pytest.mark.timeout(120), pytest.mark.unrenewed]

REPLICA, INCARNATION = "claim-replica", "inc-1"


async def _start(client: AsyncTurnkeeperClient, thread: str, turn_id: str) -> None:
    await client.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=thread,
            agent="claim-agent",
            input=struct_pb2.Value(string_value="hello"),
            replica=REPLICA,
            incarnation=INCARNATION,
        )
    )


async def _claim(client: AsyncTurnkeeperClient, turn_id: str) -> turns_pb2.ClaimTurnResponse:
    return await client.claim_turn(
        turns_pb2.ClaimTurnRequest(
            turn_id=turn_id, attempt=0, replica=REPLICA, incarnation=INCARNATION
        )
    )


def _fenced(thread: str, turn_id: str, checkpoint_ns: str = "") -> RunnableConfig:
    config = durable_config(thread, turn_id, 0)
    config["configurable"]["checkpoint_ns"] = checkpoint_ns
    return config


@pytest.mark.both_backends
async def test_the_claim_says_whether_the_thread_has_a_root_checkpoint(
    service: TurnkeeperServer,
) -> None:
    thread = f"claim-{uuid4().hex[:8]}"
    first, second = f"turn-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=service.address)
    async with AsyncTurnkeeperClient(options) as client, RemoteSaver(options=options) as saver:
        await _start(client, thread, first)
        claimed = await _claim(client, first)
        assert (claimed.checkpoint_id, claimed.thread_empty) == ("", True)

        # A subgraph's checkpoint is not the root namespace's latest.
        await saver.aput(_fenced(thread, first, "child:1"), empty_checkpoint(), {}, {})
        assert (await _claim(client, first)).thread_empty

        checkpoint = empty_checkpoint()
        await saver.aput(_fenced(thread, first), checkpoint, {"source": "input", "step": -1}, {})
        again = await _claim(client, first)
        assert (again.checkpoint_id, again.thread_empty) == (checkpoint["id"], False)

        await client.finish_turn(
            turns_pb2.FinishTurnRequest(turn_id=first, attempt=0, outcome=turns_pb2.OUTCOME_DONE)
        )
        # The thread's next turn wrote no checkpoint of its own, but the thread has
        # one: its graph must read it.
        await _start(client, thread, second)
        next_turn = await _claim(client, second)
        assert (next_turn.checkpoint_id, next_turn.thread_empty) == ("", False)


class _Counting(BoundarySaver):
    """A BoundarySaver whose remote read is counted, never sent."""

    def __init__(self) -> None:
        super().__init__("localhost:1")
        self.reads: list[RunnableConfig] = []
        self.found: CheckpointTuple | None = None


async def _counted_read(self: _Counting, config: RunnableConfig) -> CheckpointTuple | None:
    self.reads.append(config)
    return self.found


@pytest.fixture
def saver(monkeypatch: pytest.MonkeyPatch) -> _Counting:
    monkeypatch.setattr(RemoteSaver, "aget_tuple", _counted_read)
    return _Counting()


def _log(turn_id: str) -> EventLog:
    client: Any = SimpleNamespace(append_events=None)  # the log sends nothing here
    return EventLog(client, turn_id, 0, 0)


async def test_a_fresh_threads_first_read_is_answered_without_a_round_trip(
    saver: _Counting,
) -> None:
    turn_id = f"turn-{uuid4().hex[:8]}"
    events = _log(turn_id)
    saver.attach(events, thread_empty=True)
    root = _fenced("t", turn_id)
    assert await saver.aget_tuple(root) is None
    assert saver.reads == []
    # Once: what follows the first read may have written one.
    await saver.aget_tuple(root)
    assert saver.reads == [root]
    saver.detach(events)


@pytest.mark.parametrize(
    "first",
    [
        pytest.param({"checkpoint_ns": "child:1"}, id="a subgraph's read"),
        pytest.param({"checkpoint_id": "1ef-some-checkpoint"}, id="a named checkpoint"),
    ],
)
async def test_only_the_root_namespaces_latest_is_answered_from_the_claim(
    saver: _Counting, first: dict[str, str]
) -> None:
    turn_id = f"turn-{uuid4().hex[:8]}"
    events = _log(turn_id)
    saver.attach(events, thread_empty=True)
    config = _fenced("t", turn_id)
    config["configurable"].update(first)
    await saver.aget_tuple(config)
    assert saver.reads == [config]
    # And the claim's word is spent: the root's latest is asked for.
    await saver.aget_tuple(_fenced("t", turn_id))
    assert len(saver.reads) == 2
    saver.detach(events)


async def test_without_the_claims_word_every_read_is_asked(saver: _Counting) -> None:
    turn_id = f"turn-{uuid4().hex[:8]}"
    events = _log(turn_id)
    saver.attach(events)  # a startup Redrive, a hand-off from an older service
    await saver.aget_tuple(_fenced("t", turn_id))
    assert len(saver.reads) == 1
    saver.detach(events)
    # Another attempt of the turn (or no turn at all) is not told by this claim.
    saver.attach(events, thread_empty=True)
    other = durable_config("t", turn_id, 1)
    await saver.aget_tuple(other)
    await saver.aget_tuple(durable_config("t"))
    assert len(saver.reads) == 3
    saver.detach(events)


class _ClaimingClient:
    """What TurnRuntime asks of its client for a claim: ClaimTurn, answered."""

    def __init__(self, answer: turns_pb2.ClaimTurnResponse) -> None:
        self.options = ConnectionOptions(target="localhost:1")
        self.answer = answer

    async def claim_turn(self, request: turns_pb2.ClaimTurnRequest) -> turns_pb2.ClaimTurnResponse:
        return self.answer

    async def append_events(self, request: turns_pb2.AppendEventsRequest) -> None:
        raise AssertionError("nothing is appended in this test")


@pytest.mark.parametrize("empty", [True, False])
async def test_a_claimed_execution_gives_the_saver_the_claims_word(
    saver: _Counting, monkeypatch: pytest.MonkeyPatch, empty: bool
) -> None:
    turn = turns_pb2.Turn(turn_id=f"turn-{uuid4().hex[:8]}", thread_id="t", attempts=0)
    client: Any = _ClaimingClient(turns_pb2.ClaimTurnResponse(turn=turn, thread_empty=empty))
    runtime = TurnRuntime(
        SimpleNamespace(),  # type: ignore[arg-type]
        client,
        saver,
        Identity("claim-agent", "r1", "inc-1"),
        input_mapper=lambda value: value,
    )
    attached: list[tuple[bool, bool]] = []
    real_attach = saver.attach

    def attach(events: EventLog, *, thread_empty: bool = False, fresh: bool = False) -> None:
        attached.append((thread_empty, fresh))
        real_attach(events, thread_empty=thread_empty, fresh=fresh)

    async def drive(execution: Execution, events: EventLog) -> None:
        # What the graph's first read of the thread would get.
        await saver.aget_tuple(durable_config("t", execution.turn_id, execution.attempt))

    monkeypatch.setattr(saver, "attach", attach)
    monkeypatch.setattr(Execution, "_drive", drive)
    monkeypatch.setattr(Execution, "_heartbeat", lambda self: asyncio.sleep(0))
    assert runtime.admission.try_take()
    await runtime._claim(turn.turn_id, 0, "create")
    execution = runtime._executions[turn.turn_id]
    assert execution.task is not None
    await execution.task
    assert execution.assignment.thread_empty is empty
    # The claim named no checkpoint of the turn's own: it starts from its input.
    assert attached == [(empty, True)]
    assert len(saver.reads) == (0 if empty else 1)


class _State(TypedDict):
    text: str


@pytest.mark.both_backends
@pytest.mark.parametrize(
    ("empty", "fresh", "frames_before"),
    [
        pytest.param(True, True, 1, id="thread empty"),
        pytest.param(False, True, 2, id="no checkpoint of the turn's own"),
        pytest.param(False, False, 3, id="a turn going on from its own"),
    ],
)
async def test_a_fresh_turns_input_checkpoint_rides_the_first_steps_frame(
    service: TurnkeeperServer,
    monkeypatch: pytest.MonkeyPatch,
    empty: bool,
    fresh: bool,
    frames_before: int,
) -> None:
    """Decision 530: for a turn with no root checkpoint of its own, the run's input
    checkpoint is not waited for: it goes in one frame with the first step's writes,
    `values` and checkpoint, so the graph's first node (its model call) waits for
    one answer where it waited for two (and, on a thread the claim found empty, for
    no read before them: decision 480). Every checkpoint is stored, with its
    boundary."""
    frames: list[Any] = []
    real_open = AsyncTurnkeeperClient.open_checkpoint_stream
    monkeypatch.setattr(
        AsyncTurnkeeperClient,
        "open_checkpoint_stream",
        lambda self: keep_frames(real_open(self), frames),
    )
    thread, turn_id = f"ride-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=service.address)
    seen: list[int] = []

    def model(state: _State) -> _State:
        seen.append(len(frames))  # frames written before the first node ran
        return {"text": state["text"] + "!"}

    builder = StateGraph(_State)
    builder.add_node("model", model)
    builder.add_edge(START, "model")
    async with (
        AsyncTurnkeeperClient(options) as client,
        BoundarySaver(options=options, stream=True) as saver,
    ):
        await _start(client, thread, turn_id)
        assert (await _claim(client, turn_id)).thread_empty
        saver.values_of = lambda values, _depth: dict(values)
        config = durable_config(thread, turn_id, 0)
        # The run's stream as a bridge finds it, open and taking batches (a spare
        # stream of an earlier run): its first frame is a message alone.
        await saver.aget_tuple(config)
        frames.clear()
        events = EventLog(client, turn_id, 0, 0)
        saver.attach(events, thread_empty=empty, fresh=fresh)
        graph = builder.compile(checkpointer=saver)
        try:
            out = await graph.ainvoke({"text": "hi"}, config, durability="sync")
            await events.settle()
        finally:
            saver.detach(events)
        assert out == {"text": "hi!"}
        history = [c async for c in saver.alist(durable_config(thread))]
    # Before the node, each frame answered before the next: the read of the
    # thread's latest (unless the claim said there is none), then the input
    # checkpoint with the first step in one frame where main sent them in two.
    assert seen == [frames_before]
    assert [c.metadata["step"] for c in history] == [1, 0, -1]
    # Each with its boundary: the `values` before the first step's checkpoint and
    # the last one's counted, none before the input's.
    marks: list[Any] = [dict(c.metadata)["turnkeeper"] for c in history]
    assert [m["last_seq"] for m in marks] == [2, 1, 0]
