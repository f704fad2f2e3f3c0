"""A test agent: a small graph hosted by the bridge, run as a real subprocess.

Environment (besides the bridge's own, see BridgeConfig.from_env):

- JOB_GRAPH: ``four-step`` (default), ``poison``, ``approval``, ``fan-out``, ``mixed``
  (a poison job, by its name, and healthy jobs in one graph) or ``effects`` (a tool
  that charges through an exactly-once effect at RECEIVER_URL, a separate process:
  tests/support/receiver.py; EFFECT_POLICY, CHARGE_HANGS and DIVERGE below);
- SIDE_FILE: each node appends what it does here, so a test counts executions;
- SLOW_STEP: the four-step node that, on attempt SLOW_ATTEMPT only (default 0),
  streams its reply and then waits until SIGUSR1 (or SLOW_SECONDS, default 60):
  the window in which a test kills or freezes the agent; stopped there by the bridge,
  it prints ``cancelled in step<N>``;
- WAIT_FOR_GO: when "1", import everything, print ``imported`` and wait for a line
  on stdin before starting the bridge (a test warms the replacement of an agent it
  is about to kill; the incarnation begins at the go).

Prints ``ready <healthz url>`` once the bridge serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import operator
import os
import signal
import sys
import urllib.request
from typing import Annotated, Any, TypedDict, cast

from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from turnkeeper.agent.bridge import Bridge, BridgeConfig, idempotency_key
from turnkeeper.agent.effect import Policy, effect

# Set by SIGUSR1: ends the wait of the slow step.
RELEASE = asyncio.Event()


class Job(TypedDict):
    job: str
    results: Annotated[list[str], operator.add]


def note(line: str) -> None:
    """Append a line to the side file, durably: the process may be SIGKILLed next."""
    path = os.environ.get("SIDE_FILE")
    if not path:
        return
    with open(path, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


@tool
def record(entry: str) -> str:
    """Record an entry in the job's ledger (a side effect that must happen once)."""
    note(f"ledger {entry} key={idempotency_key()}")
    return f"recorded {entry}"


async def say(text: str) -> str:
    """A deterministic chat model streaming `text` token by token."""
    model = GenericFakeChatModel(messages=iter([AIMessage(content=text)]))
    reply = await model.ainvoke("go")
    return str(reply.content)


def step(i: int) -> Any:
    async def node(state: Job, config: RunnableConfig) -> dict[str, Any]:
        try:
            return await run_step(i, state, config)
        except asyncio.CancelledError:
            # The bridge stopped the graph in this step (a cancel, a deadline, an
            # erasure): tests wait for this line before they release a slow step.
            print(f"cancelled in step{i}", flush=True)
            raise

    return node


async def run_step(i: int, state: Job, config: RunnableConfig) -> dict[str, Any]:
    attempt = config["configurable"]["attempt"]
    note(f"start step{i} attempt={attempt}")
    text = await say(f"step {i} of {state['job']} is done")
    if i == 3:
        call = {"name": "record", "args": {"entry": f"step{i}"}, "id": f"call-{i}"}
        await record.ainvoke({**call, "type": "tool_call"})
    slow = os.environ.get("SLOW_STEP") == str(i)
    if slow and attempt == int(os.environ.get("SLOW_ATTEMPT", "0")):
        note(f"waiting in step{i}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(RELEASE.wait(), float(os.environ.get("SLOW_SECONDS", "60")))
    note(f"done step{i}")
    return {"results": [text]}


def four_step() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Job)
    for i in range(1, 5):
        builder.add_node(f"step{i}", step(i))
    builder.add_edge(START, "step1")
    for i in range(1, 4):
        builder.add_edge(f"step{i}", f"step{i + 1}")
    builder.add_edge("step4", END)
    return builder


async def poison_node(state: Job, config: RunnableConfig) -> dict[str, Any]:
    note(f"poison run attempt={config['configurable']['attempt']}")
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def poison() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Job)
    builder.add_node("step1", step(1))
    builder.add_node("poison", poison_node)
    builder.add_edge(START, "step1")
    builder.add_edge("step1", "poison")
    builder.add_edge("poison", END)
    return builder


async def approve(state: Job, config: RunnableConfig) -> dict[str, Any]:
    answer = interrupt({"question": f"approve {state['job']}?"})
    attempt = config["configurable"]["attempt"]
    note(f"approve {state['job']} resumed with {answer!r} attempt={attempt}")
    return {"results": [f"approved={answer}"]}


def approval() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Job)
    builder.add_node("step1", step(1))
    builder.add_node("approve", approve)
    builder.add_node("step2", step(2))
    builder.add_edge(START, "step1")
    builder.add_edge("step1", "approve")
    builder.add_edge("approve", "step2")
    builder.add_edge("step2", END)
    return builder


def branch(name: str, waits: bool) -> Any:
    async def node(state: Job, config: RunnableConfig) -> dict[str, Any]:
        attempt = config["configurable"]["attempt"]
        note(f"start {name} attempt={attempt}")
        text = await say(f"the {name} branch of {state['job']}")
        if waits and attempt == 0:
            note(f"waiting in {name}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(RELEASE.wait(), float(os.environ.get("SLOW_SECONDS", "60")))
        note(f"done {name}")
        return {"results": [text]}

    return node


def fan_out() -> StateGraph[Any, Any, Any, Any]:
    """step1, then two branches in one superstep (the slow one waits on attempt 0),
    then join."""
    builder = StateGraph(Job)
    builder.add_node("step1", step(1))
    builder.add_node("fast", branch("fast", waits=False))
    builder.add_node("slow", branch("slow", waits=True))
    builder.add_node("join", step(4))
    builder.add_edge(START, "step1")
    builder.add_edge("step1", "fast")
    builder.add_edge("step1", "slow")
    builder.add_edge(["fast", "slow"], "join")
    builder.add_edge("join", END)
    return builder


async def gate(state: Job, config: RunnableConfig) -> dict[str, Any]:
    """A poison job (its name starts with "poison") kills the process here, every
    time; a healthy one works a while (HEALTHY_SECONDS), so that it is in flight
    when a poison job sharing the process kills it."""
    attempt = config["configurable"]["attempt"]
    if state["job"].startswith("poison"):
        note(f"poison {state['job']} attempt={attempt}")
        os.kill(os.getpid(), signal.SIGKILL)
    note(f"gate {state['job']} attempt={attempt}")
    await asyncio.sleep(float(os.environ.get("HEALTHY_SECONDS", "1")))
    return {"results": [f"{state['job']} passed the gate"]}


def mixed() -> StateGraph[Any, Any, Any, Any]:
    """step1, the gate (poison or healthy by the job's name), step2."""
    builder = StateGraph(Job)
    builder.add_node("step1", step(1))
    builder.add_node("gate", gate)
    builder.add_node("step2", step(2))
    builder.add_edge(START, "step1")
    builder.add_edge("step1", "gate")
    builder.add_edge("gate", "step2")
    builder.add_edge("step2", END)
    return builder


async def send_charge(amount: int, *, key: str = "") -> dict[str, Any]:
    """Charge `amount` at the receiver, passing the effect's key on as the
    Idempotency-Key, as a payment API asks. With CHARGE_HANGS=1 the first attempt
    hangs after the receiver applied it, before the outcome can be recorded: the
    window in which a test kills the agent to leave the call uncertain."""
    request = urllib.request.Request(
        os.environ["RECEIVER_URL"] + "/charge",
        data=json.dumps({"amount": amount}).encode(),
        headers={"Idempotency-Key": key, "Content-Type": "application/json"},
        method="POST",
    )

    def send() -> dict[str, Any]:
        with urllib.request.urlopen(request, timeout=10) as answer:
            charged: dict[str, Any] = json.loads(answer.read())
            return charged

    charged = await asyncio.to_thread(send)
    if os.environ.get("CHARGE_HANGS") == "1" and get_config()["configurable"]["attempt"] == 0:
        print("charged, hanging", flush=True)
        await asyncio.Event().wait()
    return charged


# EFFECT_POLICY: the charge's policy for an uncertain call; unset, the default (it
# takes its key: retry).
charge = effect(
    name="charge", policy=cast("Policy | None", os.environ.get("EFFECT_POLICY") or None)
)(send_charge)


@tool
async def pay(amount: int) -> str:
    """Pay `amount` (a side effect that must happen once)."""
    charged = await charge(amount)
    return f"paid {amount}: {charged['charge']}"


async def pay_node(state: Job, config: RunnableConfig) -> dict[str, Any]:
    """Calls the tool, then (on SLOW_ATTEMPT) waits before the step's checkpoint:
    the window in which a test SIGKILLs the agent after the charge was recorded."""
    attempt = config["configurable"]["attempt"]
    note(f"start pay attempt={attempt}")
    # DIVERGE: from attempt 1 on, the re-run step calls the charge with another
    # amount ("amount") or not at all ("skip"), as a model answering differently would.
    diverge = os.environ.get("DIVERGE", "") if attempt > 0 else ""
    if diverge == "skip":
        note(f"skipped pay attempt={attempt}")
        return {"results": ["not paid"]}
    call = {"name": "pay", "args": {"amount": 43 if diverge else 42}, "id": "call-pay"}
    message = await pay.ainvoke({**call, "type": "tool_call"})
    note(f"paid attempt={attempt}: {message.content}")
    print(f"paid attempt={attempt}", flush=True)
    if attempt == int(os.environ.get("SLOW_ATTEMPT", "0")):
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(RELEASE.wait(), float(os.environ.get("SLOW_SECONDS", "60")))
    return {"results": [str(message.content)]}


def effects() -> StateGraph[Any, Any, Any, Any]:
    """step1, pay (a tool charging through an effect), step2."""
    builder = StateGraph(Job)
    builder.add_node("step1", step(1))
    builder.add_node("pay", pay_node)
    builder.add_node("step2", step(2))
    builder.add_edge(START, "step1")
    builder.add_edge("step1", "pay")
    builder.add_edge("pay", "step2")
    builder.add_edge("step2", END)
    return builder


GRAPHS = {
    "four-step": four_step,
    "poison": poison,
    "approval": approval,
    "fan-out": fan_out,
    "mixed": mixed,
    "effects": effects,
}


async def main() -> None:
    builder = GRAPHS[os.environ.get("JOB_GRAPH", "four-step")]()
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, RELEASE.set)
    if os.environ.get("WAIT_FOR_GO") == "1":
        print("imported", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    bridge = Bridge(builder, BridgeConfig.from_env())

    async def announce() -> None:
        await bridge.wait_subscribed()
        print(f"ready {bridge.health_url}", flush=True)

    announcing = asyncio.create_task(announce())
    await bridge.run()  # until SIGTERM
    announcing.cancel()


if __name__ == "__main__":
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(main())
