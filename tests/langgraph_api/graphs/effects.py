"""A hosted graph whose node acts on the world through an effect (docs/effects.md):
`pay` charges the amount once, however often it runs."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from turnkeeper.agent.effect import effect


class Order(TypedDict):
    amount: int
    receipts: Annotated[list[str], operator.add]


@effect
def charge(amount: int, *, key: str = "") -> str:
    return f"charged {amount} under {key}"


def pay(state: Order) -> dict[str, Any]:
    return {"receipts": [charge(state["amount"])]}


builder = StateGraph(Order)
builder.add_node("pay", pay)
builder.add_edge(START, "pay")
builder.add_edge("pay", END)
graph = builder.compile()
