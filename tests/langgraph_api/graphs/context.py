"""A graph that reports what a run gave it: LangGraph's runtime context (its
`context_schema` a dataclass, so only the keys it names arrive) and the run's
config. `before` reads them, `pause` takes CONTEXT_STEP_DELAY seconds (a window to
SIGKILL the agent in), `after` reads them again in what may be another execution."""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict


@dataclass
class Context:
    model: str = "default-model"
    user: str = "nobody"


class State(TypedDict, total=False):
    before: dict[str, Any]
    after: dict[str, Any]


def _seen(runtime: Runtime[Context]) -> dict[str, Any]:
    config = get_config()
    configurable = config.get("configurable", {})
    return {
        "model": runtime.context.model,
        "user": runtime.context.user,
        "configurable": {
            k: configurable.get(k) for k in ("model", "user", "prompt", "assistant_id")
        },
        "tags": [t for t in config.get("tags", []) if not t.startswith("graph:")],
        "recursion_limit": config.get("recursion_limit"),
    }


def before(state: State, runtime: Runtime[Context]) -> State:
    return {"before": _seen(runtime)}


async def pause(state: State) -> State:
    await asyncio.sleep(float(os.environ.get("CONTEXT_STEP_DELAY", "0")))
    return {}


def after(state: State, runtime: Runtime[Context]) -> State:
    return {"after": _seen(runtime)}


builder = StateGraph(State, context_schema=Context)
builder.add_node("before", before)
builder.add_node("pause", pause)
builder.add_node("after", after)
builder.add_edge(START, "before")
builder.add_edge("before", "pause")
builder.add_edge("pause", "after")
builder.add_edge("after", END)
graph = builder.compile()
