"""The agent the recovery benchmark kills and restarts: a 4-step graph hosted by the
bridge, as a real process.

    python -m bench.recovery_agent      # settings from TURNKEEPER_* (BridgeConfig.from_env)

Each step streams a short reply from a deterministic chat model (`token` events).
On attempt 0, step 3 streams its reply and then hangs: the window in which the
benchmark SIGKILLs the process (BENCH_HANG_STEP picks another step; 0: none, the
overload benchmark's turns, bench/overload.py). A turn whose input has ``work`` (four
seconds) sleeps that long in each step after its reply: the work the overload
benchmark gives each turn, the same quiet and oversubscribed. Prints ``ready`` once
the bridge has subscribed. With BENCH_WAIT_FOR_GO=1 it imports everything, prints
``imported`` and starts the bridge only when a line arrives on stdin, so a
replacement can be warmed up before the process it replaces is killed.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import os
import sys
from typing import Annotated, Any, NotRequired, TypedDict

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from turnkeeper.agent.bridge import Bridge, BridgeConfig

HANG_STEP = int(os.environ.get("BENCH_HANG_STEP", "3"))


class Job(TypedDict):
    job: str
    results: Annotated[list[str], operator.add]
    work: NotRequired[list[float]]


def step(i: int) -> Any:
    async def node(state: Job, config: RunnableConfig) -> dict[str, Any]:
        model = GenericFakeChatModel(messages=iter([AIMessage(content=f"step {i} is done")]))
        reply = await model.ainvoke("go")
        work = state.get("work")
        if work:
            await asyncio.sleep(work[i - 1])  # the node's work (an awaited call)
        if i == HANG_STEP and config["configurable"]["attempt"] == 0:
            await asyncio.Event().wait()  # until SIGKILL
        return {"results": [str(reply.content)]}

    return node


def graph() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Job)
    for i in range(1, 5):
        builder.add_node(f"step{i}", step(i))
    builder.add_edge(START, "step1")
    for i in range(1, 4):
        builder.add_edge(f"step{i}", f"step{i + 1}")
    builder.add_edge("step4", END)
    return builder


async def main() -> None:
    if os.environ.get("BENCH_WAIT_FOR_GO") == "1":
        # Warm: imported, waiting to start its bridge (the incarnation begins at "go").
        print("imported", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    bridge = Bridge(graph(), BridgeConfig.from_env())

    async def announce() -> None:
        await bridge.wait_subscribed()
        print("ready", flush=True)

    announcing = asyncio.create_task(announce())
    await bridge.run()  # until SIGTERM
    announcing.cancel()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(main())
