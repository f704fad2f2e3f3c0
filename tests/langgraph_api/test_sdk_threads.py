"""Threads through LangGraph's Python SDK: made, found, searched, their metadata
merged, their state and history read through the graph, edited as a node, copied,
and erased."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, NotFoundError
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2

# On SQLite and on PostgreSQL (a real cluster the tests start).
pytestmark = pytest.mark.both_backends

ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "what is a thread?"}]}


async def test_create_get_search_and_update(sdk: LangGraphClient) -> None:
    thread_id = str(uuid.uuid4())
    made = await sdk.threads.create(thread_id=thread_id, metadata={"team": "red"})
    assert made["thread_id"] == thread_id and made["status"] == "idle"
    with pytest.raises(ConflictError):
        await sdk.threads.create(thread_id=thread_id)
    again = await sdk.threads.create(thread_id=thread_id, if_exists="do_nothing")
    assert again["metadata"] == {"team": "red"}
    await sdk.threads.create(metadata={"team": "blue"})
    found = await sdk.threads.search(metadata={"team": "red"})
    assert [t["thread_id"] for t in found] == [thread_id]
    updated = await sdk.threads.update(thread_id, metadata={"owner": "ada"})
    assert updated["metadata"] == {"team": "red", "owner": "ada"}
    assert (await sdk.threads.get(thread_id))["metadata"] == updated["metadata"]
    assert await sdk.threads.count(metadata={"team": "blue"}) == 1


@pytest.mark.shared_deployment
async def test_state_history_and_an_edit_as_a_node(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    empty = await sdk.threads.get_state(thread_id)
    assert empty["values"] == {} and empty["next"] == []
    await sdk.runs.wait(thread_id, ASSISTANT, input=QUESTION)
    history = await sdk.threads.get_history(thread_id, limit=20)
    steps = [h["values"].get("step") for h in history]  # type: ignore[union-attr]
    # Newest first: the input, then after each node.
    assert steps[:3] == ["generate", "plan", "analyze"]
    after_plan = next(h for h in history if h["values"].get("step") == "plan")  # type: ignore[union-attr]
    earlier = await sdk.threads.get_state(
        thread_id, checkpoint_id=after_plan["checkpoint"]["checkpoint_id"]
    )
    assert earlier["next"] == ["generate"]
    assert earlier["values"] == after_plan["values"]
    # regenerate() in a panel: the state as if `plan` had just run, then a new run.
    edited = await sdk.threads.update_state(thread_id, {"step": "plan"}, as_node="plan")
    assert edited["checkpoint"]["checkpoint_id"]
    state = await sdk.threads.get_state(thread_id)
    assert state["next"] == ["generate"] and state["values"]["step"] == "plan"  # type: ignore[call-overload]


@pytest.mark.shared_deployment
async def test_copy_and_delete(sdk: LangGraphClient, client: AsyncTurnkeeperClient) -> None:
    thread = await sdk.threads.create(metadata={"kind": "original"})
    waited: Any = await sdk.runs.wait(thread["thread_id"], ASSISTANT, input=QUESTION)
    # The SDK types copy() as answering nothing; the server answers the new thread.
    threads: Any = sdk.threads
    copied = await threads.copy(thread["thread_id"])
    assert copied["thread_id"] != thread["thread_id"]
    original = await sdk.threads.get(thread["thread_id"])
    # A run tags its thread with its graph and assistant (the graph's default one,
    # under LangGraph's id for it), as LangGraph's server does.
    assert original["metadata"] == {
        "kind": "original",
        "graph_id": ASSISTANT,
        "assistant_id": str(
            uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), ASSISTANT)
        ),
    }
    assert copied["metadata"] == original["metadata"]
    copy_state: Any = await sdk.threads.get_state(copied["thread_id"])
    assert copy_state["values"] == waited
    [run] = await sdk.runs.list(thread["thread_id"])
    await sdk.threads.delete(thread["thread_id"])
    with pytest.raises(NotFoundError):
        await sdk.threads.get(thread["thread_id"])
    # DeleteThread's erasure: the run (a turn) is gone with the thread.
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run["run_id"]))
    assert status.state == turns_pb2.TURN_STATE_UNKNOWN
