"""The agent the fault campaign kills: one graph that takes every path a turn can
take, hosted by the real bridge, with a record of what it did and what the
service acknowledged. Run as ``python -m tests.faults.agent`` (cwd: the repo).

The graph (the turn's input picks the path with ``kind``)::

    START -> step1 -+-> step2 --------------------+-> step3 (tool) -> step4 -> END
                    +-> approve (interrupt) -> step2
                    +-> left, right (one superstep) -+
                    +-> poison (SIGKILLs its own process, every attempt)

Each node streams tokens, works for a random while (the window a kill lands in),
streams again. The record, one file per process under ``FAULT_DIR``, holds lines:

- ``start|done <turn> <node> <langgraph_step> <attempt>``: a node ran;
- ``version <turn> <attempt> <label>``: the graph version (its label) a node ran on;
- ``effect <turn> <attempt> <receipt>``: the tool's effect returned (from the
  receiver, or from the service's effect ledger without calling it again);
- ``ackev <turn> <attempt> <seq> <digest>``: AppendEvents (unary or on the saver's
  stream) / ParkTurn / FinishTurn acknowledged this event (digest of its type and data);
- ``ackend <turn> <attempt> <state> <last_seq>``: ParkTurn / FinishTurn acknowledged;
- ``ackcp <thread> <checkpoint_id>`` and ``ackwr <thread> <checkpoint_id> <task_id>``:
  PutCheckpoint / PutWrites acknowledged;
- ``stput <turn> <node> <attempt>``: the node's store write acknowledged (a turn whose
  input has ``memory``: each node puts ``{"attempt", "step"}`` under the key of its
  name in the namespace ``("faults", <turn>)``, with ``get_store()``, fenced by the
  turn's attempt, decision 317); ``stref <turn> <node> <attempt>``: refused as stale.

Lines are written with one ``write(2)`` each on an O_APPEND file, after the
acknowledgement arrived: a SIGKILL (what this agent is for) loses nothing the
kernel already has, and the harness never sees an acknowledgement that was not.

step3's tool acts through an effect (``turnkeeper.agent.effect``, policy ``retry``):
it delivers the job's entry to the receiver, a separate process that counts every
execution and applies each idempotency key once (tests/support/receiver.py).

Environment, besides the bridge's own: ``FAULT_DIR``, ``FAULT_RECEIVER_URL``,
``FAULT_STEP_SECONDS`` (the longest random work of a node), ``WAIT_FOR_GO`` (as in tests/agents/job_agent.py:
print ``imported``, wait for a line on stdin; the incarnation starts at the go).
"""

from __future__ import annotations

import asyncio
import operator
import os
import random
import signal
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, NotRequired, TypedDict

import aiohttp
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.config import get_config, get_store
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from turnkeeper.agent.bridge import Bridge, BridgeConfig
from turnkeeper.agent.effect import effect
from turnkeeper.errors import StaleAttempt
from turnkeeper.v1 import turns_pb2

from tests.agents.job_agent import say
from tests.agents.serving import run, serve, wait_for_go
from tests.faults.checks import digest

KINDS = ("plain", "fanout", "approval", "poison")


class Record:
    """This process's record file (see the module docstring)."""

    def __init__(self, directory: Path, name: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{name}-{os.getpid()}.log"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def note(self, line: str) -> None:
        os.write(self._fd, (line + "\n").encode())

    def events(self, turn_id: str, attempt: int, events: Iterable[turns_pb2.EventInput]) -> None:
        for e in events:
            self.note(f"ackev {turn_id} {attempt} {e.seq} {digest(e.type, e.data_json)}")


# Opened by main(): importing this module (the harness does) writes nothing.
RECORD: Record
STEP_SECONDS = float(os.environ.get("FAULT_STEP_SECONDS", "0.2"))
RECEIVER_URL = os.environ.get("FAULT_RECEIVER_URL", "")
# The graph version this process serves, by its label (a rolling upgrade changes it).
LABEL = os.environ.get("TURNKEEPER_VERSION_LABEL", "")


class Job(TypedDict):
    job: str
    kind: str
    results: Annotated[list[str], operator.add]
    # The nodes keep a memory in the store (the campaign's store writes).
    memory: NotRequired[bool]


async def remember(state: Job, name: str, turn_id: str, step: int, attempt: int) -> None:
    """The node's memory, written in the service's store under the turn's fence: an
    attempt re-driven away (a zombie) is refused, and nothing of it is kept."""
    if not state.get("memory"):
        return
    try:
        await get_store().aput(("faults", turn_id), name, {"attempt": attempt, "step": step})
    except StaleAttempt:
        RECORD.note(f"stref {turn_id} {name} {attempt}")
        raise
    RECORD.note(f"stput {turn_id} {name} {attempt}")


def _where(config: RunnableConfig) -> tuple[str, int, int]:
    configurable = config["configurable"]
    return configurable["turn_id"], config["metadata"]["langgraph_step"], configurable["attempt"]


@effect(policy="retry")
async def deliver(entry: str, turn_id: str, *, key: str = "") -> str:
    """Deliver the entry to the receiver; its receipt. The receiver drops a repeated
    key, so an uncertain call (the process died while it ran) is simply made again."""
    attempt = get_config()["configurable"]["attempt"]
    body = {"turn_id": turn_id, "attempt": attempt, "entry": entry}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{RECEIVER_URL}/charge", json=body, headers={"Idempotency-Key": key}
        ) as response,
    ):
        response.raise_for_status()
        receipt = str((await response.json())["charge"])
    # The answer's way back: a kill here leaves the call uncertain (applied, outcome
    # not recorded). Random, not synchronisation: nothing waits for it.
    await asyncio.sleep(random.uniform(0, STEP_SECONDS / 2))
    return receipt


@tool
async def record(entry: str) -> str:
    """Record an entry in the job's ledger (a side effect that must happen once)."""
    turn_id, _, attempt = _where(get_config())
    receipt = await deliver(entry, turn_id)
    RECORD.note(f"effect {turn_id} {attempt} {receipt}")
    return f"recorded {entry}: {receipt}"


def node(name: str) -> Any:  # add_node's node protocols do not take a plain callable type

    async def run(state: Job, config: RunnableConfig) -> dict[str, Any]:
        turn_id, step, attempt = _where(config)
        RECORD.note(f"start {turn_id} {name} {step} {attempt}")
        RECORD.note(f"version {turn_id} {attempt} {LABEL}")
        await say(f"{name} of {state['job']} begins")
        # Work (a model call, a tool): the window most kills land in. Random, not
        # synchronisation: nothing waits for it.
        await asyncio.sleep(random.uniform(0, STEP_SECONDS))
        if name == "step3":
            call = {"name": "record", "args": {"entry": name}, "id": f"call-{name}"}
            await record.ainvoke({**call, "type": "tool_call"})
            # More work after the effect: a kill here finds its outcome recorded.
            await asyncio.sleep(random.uniform(0, STEP_SECONDS))
        await remember(state, name, turn_id, step, attempt)
        await say(f"{name} of {state['job']} ends")
        RECORD.note(f"done {turn_id} {name} {step} {attempt}")
        return {"results": [name]}

    return run


async def approve(state: Job, config: RunnableConfig) -> dict[str, Any]:
    # interrupt() first: the resume re-runs this node from its start.
    answer = interrupt({"question": f"approve {state['job']}?"})
    turn_id, step, attempt = _where(config)
    RECORD.note(f"start {turn_id} approve {step} {attempt}")
    RECORD.note(f"done {turn_id} approve {step} {attempt}")
    return {"results": [f"approved={answer}"]}


async def poison(state: Job, config: RunnableConfig) -> dict[str, Any]:
    turn_id, step, attempt = _where(config)
    RECORD.note(f"start {turn_id} poison {step} {attempt}")
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def route(state: Job) -> str | list[str]:
    kind = state["kind"]
    if kind == "fanout":
        return ["left", "right"]
    return {"poison": "poison", "approval": "approve"}.get(kind, "step2")


def graph() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(Job)
    for name in ("step1", "step2", "step3", "step4", "left", "right"):
        builder.add_node(name, node(name))
    builder.add_node("approve", approve)
    builder.add_node("poison", poison)
    builder.add_edge(START, "step1")
    builder.add_conditional_edges("step1", route, ["step2", "approve", "left", "right", "poison"])
    builder.add_edge("approve", "step2")
    builder.add_edge("step2", "step3")
    builder.add_edge(["left", "right"], "step3")
    builder.add_edge("step3", "step4")
    builder.add_edge("step4", END)
    builder.add_edge("poison", END)
    return builder


def record_acknowledgements(bridge: Bridge) -> None:
    """Wrap the bridge's client and saver so that every acknowledged write is noted."""
    client, saver = bridge.client, bridge.saver
    append, park, finish = client.append_events, client.park_turn, client.finish_turn
    put, put_writes = saver.aput, saver.aput_writes
    # A run's events go on the saver's stream (the saver looks this up when a run
    # starts), else by the client's unary AppendEvents: both are noted.
    stream_append = saver.aappend_events

    async def append_events(
        request: turns_pb2.AppendEventsRequest, **kwargs: Any
    ) -> turns_pb2.AppendEventsResponse:
        response = await append(request, **kwargs)
        RECORD.events(request.turn_id, request.attempt, request.events)
        return response

    async def aappend_events(
        request: turns_pb2.AppendEventsRequest,
    ) -> turns_pb2.AppendEventsResponse:
        response = await stream_append(request)
        RECORD.events(request.turn_id, request.attempt, request.events)
        return response

    async def park_turn(
        request: turns_pb2.ParkTurnRequest, **kwargs: Any
    ) -> turns_pb2.ParkTurnResponse:
        response = await park(request, **kwargs)
        RECORD.events(request.turn_id, request.attempt, request.events)
        RECORD.note(f"ackend {request.turn_id} {request.attempt} PARKED {response.turn.last_seq}")
        return response

    async def finish_turn(
        request: turns_pb2.FinishTurnRequest, **kwargs: Any
    ) -> turns_pb2.FinishTurnResponse:
        response = await finish(request, **kwargs)
        RECORD.events(request.turn_id, request.attempt, request.events)
        state = "DONE" if request.outcome == turns_pb2.OUTCOME_DONE else "FAILED"
        RECORD.note(f"ackend {request.turn_id} {request.attempt} {state} {response.turn.last_seq}")
        return response

    async def aput(config: RunnableConfig, *args: Any) -> RunnableConfig:
        stored = await put(config, *args)
        configurable = stored["configurable"]
        if not configurable.get("checkpoint_ns"):
            RECORD.note(f"ackcp {configurable['thread_id']} {configurable['checkpoint_id']}")
        return stored

    async def aput_writes(
        config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, *args: Any
    ) -> None:
        await put_writes(config, writes, task_id, *args)
        configurable = config["configurable"]
        if not configurable.get("checkpoint_ns"):
            thread_id, checkpoint_id = configurable["thread_id"], configurable["checkpoint_id"]
            RECORD.note(f"ackwr {thread_id} {checkpoint_id} {task_id}")

    setattr(client, "append_events", append_events)  # noqa: B010  (instance, not class)
    setattr(client, "park_turn", park_turn)  # noqa: B010
    setattr(client, "finish_turn", finish_turn)  # noqa: B010
    setattr(saver, "aput", aput)  # noqa: B010
    setattr(saver, "aappend_events", aappend_events)  # noqa: B010
    setattr(saver, "aput_writes", aput_writes)  # noqa: B010


async def main() -> None:
    global RECORD
    RECORD = Record(Path(os.environ["FAULT_DIR"]), os.environ["TURNKEEPER_REPLICA"])
    await wait_for_go()
    bridge = Bridge(graph(), BridgeConfig.from_env())
    record_acknowledgements(bridge)
    await serve(bridge)


if __name__ == "__main__":
    run(main)
