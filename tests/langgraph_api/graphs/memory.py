"""A graph with long-term memory: each run remembers its input's `fact` for its
`user` (`runtime.store`), and answers every fact remembered so far for that user
(`get_store()`, a search), newest first."""

from __future__ import annotations

from typing import Any

from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    user: str
    fact: str
    facts: list[str]


async def remember(state: State, runtime: Runtime[Any]) -> State:
    assert runtime.store is not None, "no store: the host gave the graph none"
    namespace = ("memories", state["user"])
    count = len(await runtime.store.asearch(namespace, limit=1000))
    await runtime.store.aput(namespace, f"fact-{count}", {"fact": state["fact"]})
    return {}


async def recall(state: State) -> State:
    items = await get_store().asearch(("memories", state["user"]), limit=1000)
    return {"facts": [item.value["fact"] for item in items]}


builder = StateGraph(State)
builder.add_node("remember", remember)
builder.add_node("recall", recall)
builder.add_edge(START, "remember")
builder.add_edge("remember", "recall")
builder.add_edge("recall", END)
graph = builder.compile()
