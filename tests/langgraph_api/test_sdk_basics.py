"""LangGraph's Python SDK, unchanged, against turnkeeper: assistants, and a run
streamed, joined and waited for, its id a turn id everywhere."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph.pregel.remote import RemoteGraph
from langgraph_sdk.client import LangGraphClient
from turnkeeper._run_request import default_assistant_id
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.records import EventRecord
from turnkeeper_server.web.langgraph.stream import Translator

from tests.support.agents import Agent

# On SQLite and on PostgreSQL (a real cluster the tests start).
pytestmark = pytest.mark.both_backends

ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "what is a turn?"}]}


async def test_assistants_are_the_hosted_graphs(sdk: LangGraphClient) -> None:
    found = await sdk.assistants.search()
    # Each graph's default assistant, its id LangGraph's uuid5 of the graph id.
    assert sorted(a["graph_id"] for a in found) == ["approval", ASSISTANT, "effects"]
    assert {a["assistant_id"] for a in found} == {
        str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), a["graph_id"]))
        for a in found
    }
    assert [a["graph_id"] for a in await sdk.assistants.search(graph_id="approval")] == ["approval"]
    assert await sdk.assistants.count() == 3
    got = await sdk.assistants.get(ASSISTANT)
    assert got["graph_id"] == ASSISTANT
    drawn = await sdk.assistants.get_graph(ASSISTANT)
    assert {"analyze", "plan", "generate"} <= {n["id"] for n in drawn["nodes"]}
    schemas = await sdk.assistants.get_schemas(ASSISTANT)
    assert schemas["input_schema"] is not None
    assert "messages" in schemas["input_schema"]["properties"]


@pytest.mark.shared_deployment
async def test_a_streamed_run_ends_with_the_graphs_state(
    sdk: LangGraphClient, client: AsyncTurnkeeperClient
) -> None:
    thread = await sdk.threads.create(metadata={"user": "ada"})
    created: list[Any] = []
    parts = [
        p
        async for p in sdk.runs.stream(
            thread["thread_id"],
            ASSISTANT,
            input=QUESTION,
            stream_mode=["values", "updates", "messages-tuple"],
            on_run_created=created.append,
        )
    ]
    assert parts[0].event == "metadata"
    run_id = parts[0].data["run_id"]
    assert created[0]["run_id"] == run_id
    updates = [next(iter(p.data)) for p in parts if p.event == "updates"]
    assert updates == ["analyze", "plan", "generate"]
    last = [p.data for p in parts if p.event == "values"][-1]
    assert last["step"] == "generate"
    assert last["completed_turn_id"] == run_id
    assert last["completed_answer_id"] == f"answer-{run_id}"
    answer = last["messages"][-1]["content"]
    assert answer.startswith("Here is the answer")
    # The generate node's tokens, in order, make up its answer.
    tokens = [
        p.data[0]["content"]
        for p in parts
        if p.event == "messages" and p.data[0]["type"] == "AIMessageChunk"
    ]
    assert "".join(tokens).endswith(answer)
    # One id per streamed message: the model's own, as the bridge journals it.
    chunk_ids = {
        p.data[0]["id"]
        for p in parts
        if p.event == "messages"
        and p.data[1]["langgraph_node"] == "generate"
        and p.data[0]["type"] == "AIMessageChunk"
    }
    assert len(chunk_ids) == 1 and next(iter(chunk_ids)).startswith("lc_run")
    # The answer the node returned (a message of its own, not streamed) is a part
    # of its own, whole, as LangGraph's server sends it.
    returned = [p.data[0] for p in parts if p.event == "messages" and p.data[0]["type"] == "ai"]
    assert [m["id"] for m in returned] == [f"answer-{run_id}"]

    state = await sdk.threads.get_state(thread["thread_id"])
    assert state["values"] == last
    assert state["next"] == []
    got = await sdk.threads.get(thread["thread_id"])
    assert got["status"] == "idle" and (got["metadata"] or {})["user"] == "ada"
    assert got["values"] == last
    runs = await sdk.runs.list(thread["thread_id"])
    assert [(r["run_id"], r["status"]) for r in runs] == [(run_id, "success")]
    # The run is a turn: TurnStatus knows it by the same id.
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run_id))
    assert status.state == turns_pb2.TURN_STATE_DONE


@pytest.mark.shared_deployment
async def test_wait_join_and_a_threadless_run(sdk: LangGraphClient) -> None:
    waited: Any = await sdk.runs.wait(None, ASSISTANT, input=QUESTION)
    assert waited["step"] == "generate"
    thread = await sdk.threads.create()
    run = await sdk.runs.create(thread["thread_id"], ASSISTANT, input=QUESTION)
    assert run["status"] in ("pending", "running")
    joined: Any = await sdk.runs.join(thread["thread_id"], run["run_id"])
    assert joined["messages"][-1]["content"] == waited["messages"][-1]["content"]
    got = await sdk.runs.get(thread["thread_id"], run["run_id"])
    assert got["status"] == "success" and got["assistant_id"] == default_assistant_id(ASSISTANT)


@pytest.mark.shared_deployment
async def test_join_stream_resumes_after_the_last_event_id(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    run = await sdk.runs.create(thread["thread_id"], ASSISTANT, input=QUESTION)
    whole = [
        p
        async for p in sdk.runs.join_stream(
            thread["thread_id"], run["run_id"], stream_mode="updates"
        )
    ]
    assert whole[0].event == "metadata"
    whole = whole[1:]
    assert [next(iter(p.data)) for p in whole] == ["analyze", "plan", "generate"]
    # Resume after the first update, as a client that lost its connection does.
    first_id = whole[0].id
    assert first_id is not None
    rest = [
        p
        async for p in sdk.runs.join_stream(
            thread["thread_id"], run["run_id"], stream_mode="updates", last_event_id=first_id
        )
    ]
    assert [next(iter(p.data)) for p in rest] == ["plan", "generate"]


@pytest.mark.shared_deployment
async def test_join_stream_without_a_mode_streams_values(sdk: LangGraphClient) -> None:
    """The SDK sends `stream_mode=` (empty) when given none; that is no mode, so
    LangGraph's default, `values`, not a 422."""
    thread = await sdk.threads.create()
    run = await sdk.runs.create(thread["thread_id"], ASSISTANT, input=QUESTION)
    parts = [p async for p in sdk.runs.join_stream(thread["thread_id"], run["run_id"])]
    assert parts[0].event == "metadata"
    assert {p.event for p in parts[1:]} == {"values"}
    assert parts[-1].data["step"] == "generate"


async def test_remote_graph_invokes_and_streams_a_hosted_graph(api_url: str, host: Agent) -> None:
    remote = RemoteGraph(ASSISTANT, url=api_url)
    thread: Any = {"configurable": {"thread_id": str(uuid.uuid4())}}
    out = await remote.ainvoke(QUESTION, thread)
    assert out["step"] == "generate"
    nodes = [next(iter(chunk)) async for chunk in remote.astream(QUESTION, stream_mode="updates")]
    assert nodes == ["analyze", "plan", "generate"]
    # The thread it ran on holds the state it answered with.
    assert (await remote.aget_state(thread)).values == out
    # The host froze what loading made out of the cyclic collector (decision 520):
    # its graphs, LangChain's, LangGraph's and grpc's objects, far more than a few.
    line = await host.wait_line(lambda text: "frozen out of the cyclic garbage" in text, 30)
    assert int(line.split(" objects from startup")[0].rsplit(" ", 1)[-1]) > 10_000, line


def test_a_truncated_values_event_sends_no_state() -> None:
    """An event over the size limit is journaled as its size alone: no part, rather
    than a client told the state is None."""
    translator = Translator("r1", frozenset({"values"}))
    whole = EventRecord("r1", 1, 0, "values", '{"values": {"step": "plan"}}', 0.0)
    cut = EventRecord("r1", 2, 0, "values", '{"truncated": true, "bytes": 300000}', 0.0)
    assert translator.parts(whole) == [("values", {"step": "plan"})]
    assert translator.parts(cut) == []
    assert translator.outcome() == {"step": "plan"}
