"""The 4-step durable turn every checkpointer comparison runs, and how it is timed.

A turn is a 4-node linear LangGraph graph over ~2 KB of state, run with
`durability="sync"` (each step's checkpoint committed before the next step starts,
as turnkeeper runs every turn), on a thread of its own. The DBOS and Restate
comparisons run the same four steps over the same state (bench/dbos_turn.py,
bench/restate_turn.py).
"""

from __future__ import annotations

import asyncio
import operator
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph

from bench.common import median

STEPS = ("plan", "retrieve", "act", "answer")
# ~2 KB of state carried through every step.
PAYLOAD = ("turnkeeper benchmark state " * 80)[:2048]


class State(TypedDict):
    payload: str
    steps: Annotated[list[str], operator.add]


def step(name: str) -> Callable[[State], dict[str, Any]]:
    def run(state: State) -> dict[str, Any]:
        return {"steps": [name]}

    run.__name__ = name
    return run


def build(checkpointer: BaseCheckpointSaver[Any] | None) -> CompiledStateGraph[Any]:
    graph = StateGraph(State)
    previous = START
    for name in STEPS:
        # Any: add_node's overloads resolve differently depending on which optional
        # packages are installed (the bench extra); the node is a plain State -> dict.
        node: Any = step(name)
        graph.add_node(name, node)
        graph.add_edge(previous, name)
        previous = name
    graph.add_edge(previous, END)
    return graph.compile(checkpointer=checkpointer)


def graph_turn(graph: CompiledStateGraph[Any]) -> Callable[[], None]:
    # Without a checkpointer LangGraph refuses a durability argument.
    durable = graph.checkpointer is not None

    def turn() -> None:
        config: RunnableConfig = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex}"}}
        state: dict[str, Any] = {"payload": PAYLOAD, "steps": []}
        if durable:
            result = graph.invoke(state, config, durability="sync")
        else:
            result = graph.invoke(state, config)
        if result["steps"] != list(STEPS):
            raise RuntimeError(f"the turn ran {result['steps']}")

    return turn


def single(turn: Callable[[], None], count: int) -> float:
    """Median seconds per turn, turns run one after the other."""
    turn()  # warm up: connections, code paths
    times = []
    for _ in range(count):
        started = time.perf_counter()
        turn()
        times.append(time.perf_counter() - started)
    return median(times)


def concurrent(turn: Callable[[], None], count: int, callers: int) -> float:
    """Turns per second with `callers` threads running `count` turns in all."""
    with ThreadPoolExecutor(callers) as pool:
        list(pool.map(lambda _: turn(), range(callers)))  # warm up every thread
        started = time.perf_counter()
        list(pool.map(lambda _: turn(), range(count)))
        return count / (time.perf_counter() - started)


def async_graph_turn(graph: CompiledStateGraph[Any]) -> Callable[[], Awaitable[None]]:
    """The same turn through the graph's async API (``ainvoke``), as the bridge runs it."""

    async def turn() -> None:
        config: RunnableConfig = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex}"}}
        state: dict[str, Any] = {"payload": PAYLOAD, "steps": []}
        result = await graph.ainvoke(state, config, durability="sync")
        if result["steps"] != list(STEPS):
            raise RuntimeError(f"the turn ran {result['steps']}")

    return turn


async def async_single(turn: Callable[[], Awaitable[None]], count: int) -> float:
    """:func:`single` for an async turn."""
    await turn()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        await turn()
        times.append(time.perf_counter() - started)
    return median(times)


async def async_callers(turn: Callable[[], Awaitable[None]], count: int, callers: int) -> float:
    """Seconds for `count` turns, `callers` tasks at once on one event loop, each
    starting the next turn when its last ends."""
    left = iter(range(count))

    async def caller() -> None:
        for _ in left:
            await turn()

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return time.perf_counter() - started


async def async_concurrent(turn: Callable[[], Awaitable[None]], count: int, callers: int) -> float:
    """:func:`concurrent` for an async turn: `callers` tasks on one event loop."""
    await asyncio.gather(*(turn() for _ in range(callers)))
    return count / await async_callers(turn, count, callers)
