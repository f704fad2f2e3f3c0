"""The four-step agent: outline -> research -> draft -> publish, hosted by the bridge.

Each step streams a reply from a deterministic chat model (so a re-run step says
what the lost run said); ``publish`` calls a tool that must act once: an effect
(``turnkeeper.agent.effect``), recorded in the service's effect ledger, so a re-run
of the step gets the recorded outcome instead of publishing again. Run it with the
service and NATS up::

    TURNKEEPER_ADDRESS=127.0.0.1:50051 NATS_URL=nats://127.0.0.1:4222 \\
        python examples/durable-four-step/agent.py

Environment, besides the bridge's own (``turnkeeper.agent.bridge.BridgeConfig.from_env``;
the agent name defaults to ``four-step``):

- ``STEP_LOG``: a file each step appends to when it starts and ends, and the
  ledger of published posts: how the walkthrough counts what ran;
- ``CRASH_WINDOW_STEP``: in attempt ``CRASH_WINDOW_ATTEMPT`` (default 0), that step
  waits after streaming and after its tool (``CRASH_WINDOW_SECONDS``, default 30):
  the moment the walkthrough SIGKILLs us;
- ``CRASH_AT_STEP``: on the first attempt, that step SIGKILLs its own process after
  streaming (the containers' walkthrough, where compose restarts the agent).

Prints ``ready`` once the bridge serves.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import os
import signal
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from turnkeeper.agent.bridge import Bridge, BridgeConfig
from turnkeeper.agent.effect import effect

STEPS = ("outline", "research", "draft", "publish")
REPLIES = {
    "outline": "Three parts: what a turn is, why it dies, how it comes back.",
    "research": "A turn survives when its events and checkpoints live outside the process.",
    "draft": "Your agent died mid-sentence. The turn did not.",
    "publish": "Published.",
}


class Job(TypedDict):
    topic: str
    results: Annotated[list[str], operator.add]


def log_step(line: str) -> None:
    """Append to STEP_LOG durably: the process may be SIGKILLed right after."""
    path = os.environ.get("STEP_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


@effect
def publish(title: str, *, key: str = "") -> str:
    """Publish the post under its idempotency key. A real publisher is given the key
    and refuses a second post under it: then an uncertain call (the process died
    while it ran) is simply made again (the policy ``retry``, the default for a
    function that takes its key)."""
    log_step(f"ledger published {title!r} key={key}")
    return f"post {title!r} is live"


@tool
def publish_post(title: str) -> str:
    """Publish the post, once."""
    return publish(title)


def make_step(number: int, name: str) -> Any:
    async def step(state: Job, config: RunnableConfig) -> dict[str, Any]:
        attempt = config["configurable"]["attempt"]
        log_step(f"start {name} attempt={attempt}")
        model = GenericFakeChatModel(messages=iter([AIMessage(content=REPLIES[name])]))
        reply = await model.ainvoke(f"{name}: {state['topic']}")
        if name == "publish":
            call = {"name": "publish_post", "args": {"title": state["topic"]}, "id": "publish-1"}
            await publish_post.ainvoke({**call, "type": "tool_call"})
        if attempt == 0 and os.environ.get("CRASH_AT_STEP") == str(number):
            log_step(f"crash in {name}")
            os.kill(os.getpid(), signal.SIGKILL)
        window_attempt = int(os.environ.get("CRASH_WINDOW_ATTEMPT", "0"))
        if attempt == window_attempt and os.environ.get("CRASH_WINDOW_STEP") == str(number):
            await asyncio.sleep(float(os.environ.get("CRASH_WINDOW_SECONDS", "30")))
        log_step(f"done {name}")
        return {"results": [str(reply.content)]}

    return step


def build() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Job)
    for number, name in enumerate(STEPS, start=1):
        builder.add_node(name, make_step(number, name))
    builder.add_edge(START, STEPS[0])
    for before, after in itertools.pairwise(STEPS):
        builder.add_edge(before, after)
    builder.add_edge(STEPS[-1], END)
    return builder


async def main() -> None:
    bridge = Bridge(build(), BridgeConfig.from_env(os.environ.get("TURNKEEPER_AGENT", "four-step")))

    async def announce() -> None:
        await bridge.wait_subscribed()
        print(f"ready {bridge.health_url}", flush=True)

    announcing = asyncio.create_task(announce())
    await bridge.run()  # until SIGTERM (docker stop) or Ctrl-C
    announcing.cancel()


if __name__ == "__main__":
    logging.basicConfig(
        level=os.environ.get("LOG_LEVEL", "INFO"),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(main())
