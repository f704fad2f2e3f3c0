"""A messages graph with an approval, for the chat page's test
(tests/web/test_chat_messages_browser.py) under ``turnkeeper dev``: ``think`` notes
the question's topic, ``review`` asks ``interrupt()`` before the reply, ``answer``
streams the reply word by word. The chat model is the quick start's deterministic
stand-in (examples/quickstart/graph.py, imported from the repository: the test puts
it on PYTHONPATH), so a re-run says what the lost run said.

In its first run of a thread, ``answer`` streams its reply and then waits (a file
``held-<thread>`` next to this one marks it), so the test can SIGKILL the graphs'
process mid-reply; the run taken back from the checkpoint streams it again and ends.
The question "fail" makes ``think`` raise, for the page's failed run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

from langchain_core.messages import AIMessage, AnyMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import interrupt
from typing_extensions import TypedDict

from examples.quickstart.graph import FakeModel

HERE = Path(__file__).resolve().parent


class State(TypedDict, total=False):
    messages: Annotated[list[AnyMessage], add_messages]
    topic: str
    approved: Any


model = FakeModel()


async def think(state: State) -> State:
    question = str(state["messages"][-1].content) if state.get("messages") else ""
    if question == "fail":
        raise ValueError("asked to fail: the graph raises in think")
    reply = await model.ainvoke([*state.get("messages", []), AIMessage(content="think")])
    return {"topic": str(reply.content)}


def review(state: State) -> State:
    return {"approved": interrupt({"send a reply about": state.get("topic", "")})}


async def answer(state: State, config: RunnableConfig) -> State:
    configurable = config.get("configurable", {})
    # Marked before the reply streams, not after: the test kills the process once the
    # page shows the whole reply, which can be before this process gets past its last
    # token (its append answered), and a run taken back with no mark waited forever.
    held = HERE / f"held-{configurable.get('thread_id')}"
    first_run = not held.exists()
    if first_run:
        held.write_text("the first run of answer streams its reply and waits here\n")
    text = ""
    async for chunk in model.astream([*state.get("messages", []), AIMessage(content="answer")]):
        text += str(chunk.content)
    if first_run:
        await asyncio.Event().wait()  # until the test kills the process
    run_id = configurable.get("run_id")
    return {"messages": [AIMessage(content=text, id=f"answer-{run_id}")]}


builder = StateGraph(State)
builder.add_node("think", think)
builder.add_node("review", review)
builder.add_node("answer", answer)
builder.add_edge(START, "think")
builder.add_edge("think", "review")
builder.add_edge("review", "answer")
builder.add_edge("answer", END)
graph = builder.compile()
