"""A graph with a subgraph and a Send fan-out, for the stream modes and the
subgraph views: `plan` sends one `work` task per topic, then `inner` (a compiled
subgraph with two nodes of its own, sharing the `log` channel) runs. With
`pause` set, the subgraph's `second` node asks a person first (interrupt())."""

from __future__ import annotations

import operator
from typing import Annotated

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send, interrupt
from typing_extensions import TypedDict


class InnerState(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    note: str
    pause: bool


def first(state: InnerState) -> InnerState:
    return {"log": ["inner:first"], "note": "noted"}


def second(state: InnerState) -> InnerState:
    if state.get("pause"):
        answer = interrupt({"question": "go on?"})
        return {"log": [f"inner:second:{answer}"]}
    return {"log": ["inner:second"]}


inner_builder = StateGraph(InnerState)
inner_builder.add_node("first", first)
inner_builder.add_node("second", second)
inner_builder.add_edge(START, "first")
inner_builder.add_edge("first", "second")
inner_builder.add_edge("second", END)
inner = inner_builder.compile()


class NestedState(TypedDict, total=False):
    topics: list[str]
    log: Annotated[list[str], operator.add]
    pause: bool


def plan(state: NestedState) -> NestedState:
    return {"log": ["plan"]}


def fan_out(state: NestedState) -> list[Send]:
    return [Send("work", {"topics": [t]}) for t in state.get("topics", [])]


def work(state: NestedState) -> NestedState:
    return {"log": [f"work:{state['topics'][0]}"]}


builder = StateGraph(NestedState)
builder.add_node("plan", plan)
builder.add_node("work", work)
builder.add_node("inner", inner)
builder.add_edge(START, "plan")
builder.add_conditional_edges("plan", fan_out, ["work"])
builder.add_edge("work", "inner")
builder.add_edge("inner", END)
graph = builder.compile()
