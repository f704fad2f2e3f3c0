"""A graph that stops for a person: `draft` writes (and reports progress on the
`custom` stream), `review` calls interrupt() and keeps the draft only if the answer
approves it."""

from __future__ import annotations

from typing import Any

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class ApprovalState(TypedDict, total=False):
    topic: str
    draft: str
    verdict: str


def draft(state: ApprovalState) -> ApprovalState:
    # A `custom` stream part, as a node reporting progress writes one.
    get_stream_writer()({"progress": "drafting"})
    return {"draft": f"a draft about {state.get('topic', 'nothing')}"}


def review(state: ApprovalState) -> ApprovalState:
    answer: Any = interrupt({"question": "approve the draft?", "draft": state.get("draft")})
    return {"verdict": "approved" if answer == "yes" else "rejected"}


builder = StateGraph(ApprovalState)
builder.add_node("draft", draft)
builder.add_node("review", review)
builder.add_edge(START, "draft")
builder.add_edge("draft", "review")
builder.add_edge("review", END)
graph = builder.compile()
