"""LangGraph's Python SDK, unchanged, against turnkeeper: assistants, threads, runs."""

from __future__ import annotations

from langgraph_sdk.client import LangGraphClient

ASSISTANT = "durable-execution"


async def test_assistants_are_the_hosted_graphs(sdk: LangGraphClient) -> None:
    found = await sdk.assistants.search()
    assert [a["assistant_id"] for a in found] == [ASSISTANT]
    got = await sdk.assistants.get(ASSISTANT)
    assert got["graph_id"] == ASSISTANT
    drawn = await sdk.assistants.get_graph(ASSISTANT)
    ids = {n["id"] for n in drawn["nodes"]}
    assert {"analyze", "plan", "generate"} <= ids
    schemas = await sdk.assistants.get_schemas(ASSISTANT)
    assert "messages" in schemas["input_schema"]["properties"]


async def test_a_streamed_run_ends_with_the_graphs_state(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create(metadata={"user": "ada"})
    parts = [
        p
        async for p in sdk.runs.stream(
            thread["thread_id"],
            ASSISTANT,
            input={"messages": [{"role": "user", "content": "what is a turn?"}]},
            stream_mode=["values", "updates"],
        )
    ]
    events = [p.event for p in parts]
    assert events[0] == "metadata"
    updates = [next(iter(p.data)) for p in parts if p.event == "updates"]
    assert updates == ["analyze", "plan", "generate"]
    last = [p.data for p in parts if p.event == "values"][-1]
    assert last["step"] == "generate"
    assert last["messages"][-1]["content"].startswith("Here is the answer")
    state = await sdk.threads.get_state(thread["thread_id"])
    assert state["values"] == last
    assert state["next"] == []
    got = await sdk.threads.get(thread["thread_id"])
    assert got["status"] == "idle" and got["metadata"]["user"] == "ada"
    runs = await sdk.runs.list(thread["thread_id"])
    assert [r["status"] for r in runs] == ["success"]
