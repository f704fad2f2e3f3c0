"""A payment behind a person's approval: `gate` calls interrupt() and records the
answer; `act` pays (an effect) only when the gate approved. The human-in-the-loop
case the rights of decision 283 protect (tests/langgraph_api/test_sdk_rights.py)."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from turnkeeper.agent.effect import effect


class Payment(TypedDict, total=False):
    amount: int
    approved: bool
    receipts: Annotated[list[str], operator.add]


@effect
def pay_out(amount: int, *, key: str = "") -> str:
    return f"paid {amount} under {key}"


def gate(state: Payment) -> dict[str, Any]:
    answer: Any = interrupt({"question": "pay?", "amount": state.get("amount")})
    return {"approved": answer is True}


def act(state: Payment) -> dict[str, Any]:
    return {"receipts": [pay_out(state.get("amount", 0))]}


def after_gate(state: Payment) -> str:
    return "act" if state.get("approved") is True else END


builder = StateGraph(Payment)
builder.add_node("gate", gate)
builder.add_node("act", act)
builder.add_edge(START, "gate")
builder.add_conditional_edges("gate", after_gate, ["act", END])
builder.add_edge("act", END)
graph = builder.compile()
