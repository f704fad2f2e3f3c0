"""A LangGraph API run whose stream asks for no `messages` mode journals no model
token (decision 770): its models are not made to stream, as LangGraph's server runs
such a run; one that asks for `messages-tuple` journals them as before. What the
run still records is every step whole, so a later `join_stream` with a `messages`
mode gets each message a node returned, whole, at its step."""

from __future__ import annotations

from typing import Any

from langgraph_sdk.client import LangGraphClient
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2

ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "what is a turn?"}]}


async def journaled_types(client: AsyncTurnkeeperClient, run_id: str) -> list[str]:
    response = await client.list_events(turns_pb2.ListEventsRequest(turn_id=run_id))
    return [e.type for e in response.events]


async def test_a_run_that_asks_for_no_messages_mode_journals_no_token(
    sdk: LangGraphClient, client: AsyncTurnkeeperClient
) -> None:
    thread = await sdk.threads.create()
    runs: dict[str, str] = {}
    asked: list[tuple[str, Any]] = [
        ("plain", ["values", "updates"]),
        ("chat", ["values", "messages-tuple"]),
    ]
    for name, modes in asked:
        parts = [
            p
            async for p in sdk.runs.stream(
                thread["thread_id"], ASSISTANT, input=QUESTION, stream_mode=modes
            )
        ]
        runs[name] = parts[0].data["run_id"]
        assert parts[-1].data["step"] == "generate"
    plain = await journaled_types(client, runs["plain"])
    chat = await journaled_types(client, runs["chat"])
    # Each run's three steps; the model's tokens only for the run that shows them.
    assert plain.count("step") == chat.count("step") == 3
    assert "token" not in plain
    assert chat.count("token") > 0
    assert [t for t in chat if t != "token"] == plain

    # Joined later with a `messages` mode: the message the node returned, whole.
    joined = [
        p
        async for p in sdk.runs.join_stream(
            thread["thread_id"], runs["plain"], stream_mode="messages-tuple"
        )
    ]
    messages = [p.data[0] for p in joined if p.event == "messages"]
    assert [(m["type"], m["id"]) for m in messages] == [("ai", f"answer-{runs['plain']}")]
