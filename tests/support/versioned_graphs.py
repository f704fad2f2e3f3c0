"""Two versions of one small graph, for the version tests: v1 drafts, asks a person
(``interrupt``) and publishes; each other variant changes one thing a deploy can
change. A turn parked in ``ask`` under v1 can continue on a variant exactly when the
``compatible`` rule says so (docs/versions.md):

=================  ==================================  ===========
variant            change                              compatible
=================  ==================================  ===========
``v1``             none                                yes
``label``          the same graph, labelled ``v1.1``   yes
``new-channel``    a new state field ``notes``         yes
``renamed``        node ``ask`` renamed ``approve``    no
``removed``        node ``ask`` removed                no
``reducer``        ``log`` loses its ``add`` reducer   no
=================  ==================================  ===========
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, Final, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    answer: str


class WithNotes(State, total=False):
    notes: str


class PlainLog(TypedDict, total=False):
    log: list[str]
    answer: str


def _ask(state: Any) -> Any:
    return {"answer": str(interrupt({"question": "publish?"}))}


def _builder(schema: Any, ask: str | None, label: str) -> StateGraph[Any, Any, Any, Any]:
    """Each node writes its name and the label of the code that ran it to ``log``, so
    a turn's output says which version ran which step."""

    def draft(state: Any) -> Any:
        return {"log": [f"draft@{label}"]}

    def publish(state: Any) -> Any:
        return {"log": [f"publish@{label}:{state.get('answer')}"]}

    graph = StateGraph(schema)
    graph.add_node("draft", draft)
    graph.add_node("publish", publish)
    graph.add_edge(START, "draft")
    if ask is None:
        graph.add_edge("draft", "publish")
    else:
        graph.add_node(ask, _ask)
        graph.add_edge("draft", ask)
        graph.add_edge(ask, "publish")
    graph.add_edge("publish", END)
    return graph


VARIANTS: Final = ("v1", "label", "new-channel", "renamed", "removed", "reducer")
COMPATIBLE: Final = {"v1", "label", "new-channel"}


def build(variant: str) -> tuple[StateGraph[Any, Any, Any, Any], str]:
    """The variant's builder and its label."""
    made = {
        "v1": (State, "ask", "v1"),
        "label": (State, "ask", "v1.1"),
        "new-channel": (WithNotes, "ask", "v2-notes"),
        "renamed": (State, "approve", "v2-renamed"),
        "removed": (State, None, "v2-removed"),
        "reducer": (PlainLog, "ask", "v2-reducer"),
    }
    if variant in made:
        schema, ask, label = made[variant]
        return _builder(schema, ask, label), label
    raise ValueError(f"no variant {variant!r}; one of {', '.join(VARIANTS)}")
