"""A small LangGraph graph with a subgraph that interrupts (root and child
namespaces, pending writes, an interrupt and a resume), and its state history
without what differs from run to run: what the saver suites compare across savers."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    topic: str
    answer: str


class Review(TypedDict, total=False):
    topic: str
    answer: str


def _first(state: State) -> State:
    return {"log": ["first"], "topic": "deploy"}


def _ask(state: Review) -> Review:
    answer = interrupt({"question": f"approve {state['topic']}?"})
    return {"answer": str(answer)}


def _last(state: State) -> State:
    return {"log": [f"answer:{state['answer']}", "last"]}


def build_graph(checkpointer: BaseCheckpointSaver[Any]) -> CompiledStateGraph[Any]:
    review = StateGraph(Review)
    review.add_node("ask", _ask)
    review.add_edge(START, "ask")
    review.add_edge("ask", END)
    graph = StateGraph(State)
    graph.add_node("first", _first)
    graph.add_node("review", review.compile())
    graph.add_node("last", _last)
    graph.add_edge(START, "first")
    graph.add_edge("first", "review")
    graph.add_edge("review", "last")
    graph.add_edge("last", END)
    return graph.compile(checkpointer=checkpointer)


def history(checkpointer: BaseCheckpointSaver[Any], thread_id: str) -> list[tuple[Any, ...]]:
    """The thread's state history without what differs from run to run (ids,
    timestamps): values, next nodes, metadata source/step/keys, and the pending
    interrupts."""
    graph = build_graph(checkpointer)
    return [
        (
            snapshot.values,
            snapshot.next,
            snapshot.metadata["source"] if snapshot.metadata else None,
            snapshot.metadata["step"] if snapshot.metadata else None,
            sorted(snapshot.metadata or {}),
            [tuple(i.value.items()) for i in snapshot.interrupts],
            snapshot.parent_config is None,
        )
        for snapshot in graph.get_state_history({"configurable": {"thread_id": thread_id}})
    ]
