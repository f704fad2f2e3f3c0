"""The bridge's JSON-RPC surface, events and lifecycle, with the bridge in-process
(a real service, a real nats-server): every request gets an answer, errors carry
JSON-RPC codes, status is answered while a turn runs, each checkpoint's boundary
is exactly the end of its step's events, /healthz, and shutdown."""

from __future__ import annotations

import asyncio
import json
import operator
import sqlite3
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph
from nats.aio.client import Client
from turnkeeper.agent.bridge import Bridge
from turnkeeper.agent.bridge._health import get_status
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import checkpoints_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Panel, all_events, result, rpc
from tests.support.bridges import bridge_config
from tests.support.nats import NatsServer, subscribe
from tests.support.turns import value

pytestmark = pytest.mark.timeout(60)

AGENT = "inproc"


class State(TypedDict):
    text: str
    hold: bool
    boom: bool
    results: Annotated[list[str], operator.add]


class Gate:
    """Holds a turn inside its node until the test lets it go."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()


def build(gate: Gate) -> StateGraph[Any, Any, Any, Any]:
    async def first(state: State) -> dict[str, Any]:
        model = GenericFakeChatModel(messages=iter([AIMessage(content=state["text"])]))
        reply = await model.ainvoke("go")
        if state["hold"]:
            gate.entered.set()
            await gate.release.wait()
        if state["boom"]:
            raise ValueError("the tool broke")
        return {"results": [str(reply.content)]}

    def second(state: State) -> dict[str, Any]:
        # A sync node: LangGraph runs it in a worker thread, and astream hands out
        # its tokens only after the node returned.
        model = GenericFakeChatModel(messages=iter([AIMessage(content="and a sync reply")]))
        return {"results": [str(model.invoke("go").content)]}

    builder = StateGraph(State)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder


def job(text: str = "hello there", *, hold: bool = False, boom: bool = False) -> dict[str, Any]:
    return {"text": text, "hold": hold, "boom": boom, "results": []}


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
async def bridge(
    service: TurnkeeperServer, nats_server: NatsServer, gate: Gate
) -> AsyncIterator[Bridge]:
    config = bridge_config(AGENT, service.address, nats_server.url, "replica-inproc")
    async with Bridge(build(gate), config) as running:
        await running.wait_subscribed()
        yield running
        gate.release.set()


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    # Not the shared `nc` (tests/support/fixtures.py): this one reconnects without
    # end and is subscribed to every turn subject, as `subscribe` leaves it.
    client, _ = await subscribe(nats_server.url, "vystak.turn.>")
    yield client
    await client.close()


async def call(nc: Client, method: str, params: Any) -> dict[str, Any]:
    return await rpc(nc, method, params, agent=AGENT, timeout=10)


async def raw(nc: Client, body: bytes) -> dict[str, Any]:
    msg = await nc.request(f"vystak.default.agents.{AGENT}.tasks", body, timeout=10)
    answer: dict[str, Any] = json.loads(msg.data)
    return answer


async def finished(client: AsyncTurnkeeperClient, turn_id: str) -> list[tuple[int, str, Any]]:
    panel = Panel()
    panel.start(client, turn_id)
    return await panel.ended()


async def run_without_tokens(
    nc: Client, client: AsyncTurnkeeperClient, text: str, turn_id: str
) -> list[tuple[int, str, Any]]:
    """A turn started as a LangGraph API run that asked for no `messages` mode starts
    it (the run option `tokens: false`, decision 770): what it showed, once ended."""
    created = await result(
        nc,
        "responses/create",
        {
            "input": job(text),
            "turn_id": turn_id,
            "thread_id": f"th-{turn_id}",
            "background": True,
            "run": {"tokens": False},
        },
        agent=AGENT,
    )
    return await finished(client, created["turn_id"])


@pytest.mark.usefixtures("bridge")
async def test_malformed_requests_get_json_rpc_errors_never_silence(nc: Client) -> None:
    cases: list[tuple[str, Any, int]] = [
        ("responses/nope", {}, -32601),
        ("responses/create", [1, 2], -32602),
        ("responses/create", {"input": "hi"}, -32602),  # no background: true
        ("responses/create", {"background": True}, -32602),  # no input
        ("responses/create", {"input": "x", "turn_id": 7, "background": True}, -32602),
        ("responses/turnStatus", {}, -32602),
        ("responses/resumeDetached", {"turn_id": "t"}, -32602),  # no resume
        ("turnkeeper/execute", {"turn_id": "t", "attempt": "one"}, -32602),
    ]
    for method, params, code in cases:
        answer = await call(nc, method, params)
        assert answer["error"]["code"] == code, (method, params, answer)
        assert answer["jsonrpc"] == "2.0" and "result" not in answer

    assert (await raw(nc, b"{not json"))["error"]["code"] == -32700
    answer = await raw(nc, json.dumps({"id": 5, "method": "responses/turnStatus"}).encode())
    assert (answer["id"], answer["error"]["code"]) == (5, -32600)


@pytest.mark.usefixtures("bridge")
async def test_service_refusals_come_back_as_server_errors_with_the_status_name(
    nc: Client, gate: Gate
) -> None:
    unknown = await call(nc, "responses/resumeDetached", {"turn_id": "ghost", "resume": None})
    assert unknown["error"]["code"] == -32000
    assert unknown["error"]["data"]["code"] == "NOT_FOUND"
    assert "ghost" in unknown["error"]["data"]["message"]

    status = await call(nc, "responses/turnStatus", {"turn_id": "ghost"})
    assert status["result"] == {
        "turn_id": "ghost",
        "status": "unknown",
        "state": "unknown",
        "attempts": 0,
        "last_seq": 0,
        "error": "",
    }

    params = {"input": job(hold=True), "turn_id": "t-busy", "thread_id": "th-busy"}
    await result(nc, "responses/create", params | {"background": True}, agent=AGENT)
    await gate.entered.wait()
    other = await call(
        nc,
        "responses/create",
        {"input": job(), "turn_id": "t-other", "thread_id": "th-busy", "background": True},
    )
    assert other["error"]["data"]["code"] == "FAILED_PRECONDITION"
    changed = await call(
        nc, "responses/create", params | {"input": job("else"), "background": True}
    )
    assert changed["error"]["data"]["code"] == "ALREADY_EXISTS"


async def test_status_is_answered_while_a_long_turn_runs(
    bridge: Bridge, nc: Client, gate: Gate, client: AsyncTurnkeeperClient
) -> None:
    created = await result(
        nc, "responses/create", {"input": job(hold=True), "background": True}, agent=AGENT
    )
    assert created["status"] == "in_progress"
    turn_id = created["turn_id"]
    assert turn_id and created["thread_id"] and created["thread_id"] != turn_id
    await gate.entered.wait()

    started = time.monotonic()
    for _ in range(3):
        status = await result(nc, "responses/turnStatus", {"turn_id": turn_id}, agent=AGENT)
        assert status["status"] == "running"
    assert time.monotonic() - started < 5
    # The same create again is the same turn, still on its way.
    again = await result(
        nc,
        "responses/create",
        {
            "input": job(hold=True),
            "turn_id": turn_id,
            "thread_id": created["thread_id"],
            "background": True,
        },
        agent=AGENT,
    )
    assert again == created
    assert bridge.runtime.active == 1

    gate.release.set()
    shown = await finished(client, turn_id)
    assert [t for _, t, _ in shown][-2:] == ["final", "turn.done"]
    again = await result(
        nc,
        "responses/create",
        {
            "input": job(hold=True),
            "turn_id": turn_id,
            "thread_id": created["thread_id"],
            "background": True,
        },
        agent=AGENT,
    )
    assert again["status"] == "completed"


@pytest.mark.usefixtures("bridge")
async def test_each_checkpoint_boundary_is_the_end_of_its_steps_events(
    nc: Client, client: AsyncTurnkeeperClient, service: TurnkeeperServer
) -> None:
    created = await result(
        nc,
        "responses/create",
        {"input": job("one two three"), "turn_id": "t-b", "thread_id": "th-b", "background": True},
        agent=AGENT,
    )
    shown = await finished(client, created["turn_id"])
    types = [t for _, t, _ in shown]
    assert types == ["token"] * 5 + ["step"] + ["token"] * 7 + ["step", "final", "turn.done"]
    assert shown[5][2] == {"node": "first", "step": 1, "update": {"results": ["one two three"]}}
    assert shown[-2][2]["output"]["results"] == ["one two three", "and a sync reply"]

    steps = {}
    async for response in client.list_checkpoints(
        checkpoints_pb2.ListCheckpointsRequest(thread_id="th-b")
    ):
        ref = response.checkpoint.ref
        steps[ref.checkpoint_id] = json.loads(response.checkpoint.metadata_json)["step"]
    with sqlite3.connect(f"file:{service.settings.sessions_path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT checkpoint_id, last_seq FROM turnkeeper_boundaries WHERE turn_id = 't-b'"
        ).fetchall()
    boundaries = sorted((steps[cid], seq) for cid, seq in rows)
    step_events = [seq for seq, t, _ in shown if t == "step"]
    # Input and start: nothing yet; then each step ends exactly at its step event.
    assert boundaries == [(-1, 0), (0, 0), (1, step_events[0]), (2, step_events[1])]


@pytest.mark.usefixtures("bridge")
async def test_tokens_are_taken_once_by_the_host_not_also_as_langgraph_messages_parts(
    nc: Client, client: AsyncTurnkeeperClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The models stream for the host's EventCapture (ModelsStream, decision 680);
    LangGraph's `messages` mode, whose parts the host dropped, makes none of its
    parts: its handler sees none of the 12 tokens (it saw each on main)."""
    from langgraph.pregel._messages import StreamMessagesHandler

    seen: list[str] = []
    original = StreamMessagesHandler.on_llm_new_token

    def counted(self: StreamMessagesHandler, token: str, **kwargs: Any) -> Any:
        seen.append(token)
        return original(self, token, **kwargs)

    monkeypatch.setattr(StreamMessagesHandler, "on_llm_new_token", counted)
    created = await result(
        nc,
        "responses/create",
        {"input": job("one two three"), "turn_id": "t-m", "thread_id": "th-m", "background": True},
        agent=AGENT,
    )
    shown = await finished(client, created["turn_id"])
    tokens = [data["text"] for _, t, data in shown if t == "token"]
    # Both models streamed, the async node's and the sync node's (in its thread).
    assert "".join(tokens) == "one two threeand a sync reply"
    assert len(tokens) == 12
    assert seen == []


@pytest.mark.usefixtures("bridge")
async def test_a_run_that_asks_for_no_tokens_streams_no_model_and_journals_its_steps(
    nc: Client, client: AsyncTurnkeeperClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A LangGraph API run whose stream asks for no `messages` mode (`run.tokens`
    false, decision 770): its models are not made to stream (neither model's
    stream is entered; both were before) and no `token` event is journaled (12
    were); its steps, their updates and its output are those of a streamed run."""
    streamed: list[str] = []
    original_stream = GenericFakeChatModel._stream
    original_astream = GenericFakeChatModel._astream

    def stream(self: GenericFakeChatModel, *args: Any, **kwargs: Any) -> Any:
        streamed.append("sync")
        return original_stream(self, *args, **kwargs)

    def astream(self: GenericFakeChatModel, *args: Any, **kwargs: Any) -> Any:
        streamed.append("async")
        return original_astream(self, *args, **kwargs)

    monkeypatch.setattr(GenericFakeChatModel, "_stream", stream)
    monkeypatch.setattr(GenericFakeChatModel, "_astream", astream)
    shown = await run_without_tokens(nc, client, "one two three", "t-q")
    assert [t for _, t, _ in shown] == ["step", "step", "final", "turn.done"]
    assert shown[0][2] == {"node": "first", "step": 1, "update": {"results": ["one two three"]}}
    assert shown[-2][2]["output"]["results"] == ["one two three", "and a sync reply"]
    assert streamed == []


@pytest.mark.usefixtures("bridge")
async def test_a_step_is_one_frame_its_event_its_writes_and_its_checkpoint(
    nc: Client, client: AsyncTurnkeeperClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step of a run that streams no token reaches the service in one frame of
    the checkpoint stream, in the boundary rule's order: its `step` event, the
    node's writes, its `values`, its checkpoint (decision 771). Both steps here; on
    main the `step` event went in a frame of its own ahead of the rest."""
    from turnkeeper_server.rpc.checkpoint_stream import StreamingCheckpointServicer

    frames: list[list[str]] = []
    original = StreamingCheckpointServicer._start

    def what(request: Any) -> list[str]:
        op = request.WhichOneof("op")
        if op == "append":
            return [f"append {e.type}" for e in request.append.events]
        return [] if op is None else [op]

    async def counted(self: Any, frame: Any, *args: Any) -> Any:
        frames.append([w for r in frame.batch for w in what(r)] if frame.batch else what(frame))
        return await original(self, frame, *args)

    monkeypatch.setattr(StreamingCheckpointServicer, "_start", counted)
    shown = await run_without_tokens(nc, client, "one two", "t-f")
    assert [t for _, t, _ in shown] == ["step", "step", "final", "turn.done"]
    steps = [f for f in frames if "append step" in f]
    assert len(steps) == 2, frames
    for frame in steps:
        assert frame == ["append step", "writes", "put"], frames


@pytest.mark.usefixtures("bridge")
async def test_a_graph_that_raises_fails_the_turn_with_an_error_event(
    nc: Client, client: AsyncTurnkeeperClient
) -> None:
    created = await result(
        nc, "responses/create", {"input": job(boom=True), "background": True}, agent=AGENT
    )
    shown = await finished(client, created["turn_id"])
    assert [t for _, t, _ in shown][-2:] == ["error", "turn.failed"]
    assert shown[-2][2] == {"type": "ValueError", "message": "the tool broke"}
    status = await result(nc, "responses/turnStatus", {"turn_id": created["turn_id"]}, agent=AGENT)
    assert status["status"] == "failed" and status["error"] == "ValueError: the tool broke"


async def test_execute_is_acknowledged_on_receipt_even_for_a_turn_it_cannot_claim(
    bridge: Bridge, nc: Client
) -> None:
    answer = await call(nc, "turnkeeper/execute", {"turn_id": "ghost", "attempt": 0})
    assert answer["result"] == {"accepted": True}
    # Still serving.
    status = await call(nc, "responses/turnStatus", {"turn_id": "ghost"})
    assert status["result"]["status"] == "unknown"
    assert bridge.runtime.active == 0


async def test_healthz_follows_the_service_and_shutdown_is_safe_twice(
    bridge: Bridge, service: TurnkeeperServer
) -> None:
    port = bridge.health.port
    assert await get_status("127.0.0.1", port) == 200
    assert await get_status("127.0.0.1", port, "/elsewhere") == 404
    await service.stop(0)
    assert await get_status("127.0.0.1", port) == 503
    await asyncio.gather(bridge.shutdown(), bridge.shutdown())
    await bridge.shutdown()
    with pytest.raises(ConnectionRefusedError):
        await get_status("127.0.0.1", port)


async def test_events_go_to_nats_as_the_turn_runs(
    bridge: Bridge, nats_server: NatsServer, client: AsyncTurnkeeperClient
) -> None:
    nc, seen = await subscribe(nats_server.url, "vystak.turn.events.t-live")
    try:
        await result(
            nc,
            "responses/create",
            {
                "input": job(hold=True),
                "turn_id": "t-live",
                "thread_id": "th-live",
                "background": True,
            },
            agent=AGENT,
        )
        # Tokens reach watchers while the node still runs, before any checkpoint.
        await seen.wait_for(lambda: len(seen.on(".t-live")) == 3)
        assert [m["data"]["text"] for m in seen.on(".t-live")] == ["hello", " ", "there"]
        assert (await all_events(client, "t-live"))[-1].seq == 3
    finally:
        await nc.close()


async def test_a_turn_that_died_before_its_first_checkpoint_restarts_from_its_input(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
    gate: Gate,
) -> None:
    # A process of this replica journaled the turn and died before its first step.
    await client.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id="t-early",
            thread_id="th-early",
            agent=AGENT,
            input=value(job("from the journal")),
            replica="replica-early",
            incarnation="a-process-that-died",
        )
    )
    nc, seen = await subscribe(nats_server.url, "vystak.turn.rewind")
    try:
        config = bridge_config(AGENT, service.address, nats_server.url, "replica-early")
        async with Bridge(build(gate), config):
            shown = await finished(client, "t-early")
        await seen.wait_for(lambda: bool(seen.messages))
    finally:
        await nc.close()
    assert shown[-2][2]["output"]["results"] == ["from the journal", "and a sync reply"]
    assert [m for _, m, _ in seen.messages] == [
        {"turn_id": "t-early", "thread_id": "th-early", "checkpoint_id": "", "seq": 0, "attempt": 1}
    ]
    final = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-early"))
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
