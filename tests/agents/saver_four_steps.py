"""A 4-node linear graph (step1 → step2 → step3 → step4) run through RemoteSaver,
as a real subprocess, for tests/saver/test_saver_crash.py.

    python saver_four_steps.py --address HOST:PORT --thread T --side-file F
        [--step3 plain|block|interrupt] [--api sync|async]
        [--crash-between writes-first|checkpoint-first]
        (start | continue | answer JSON)

- ``start`` invokes the graph with a fresh input, ``continue`` with ``None`` (resume
  from the thread's last checkpoint), ``answer JSON`` with
  ``Command(resume=<the decoded JSON>)``. Always with ``durability="sync"``.
- Every node appends a line to the side file (fsynced: the process may be SIGKILLed
  next), so a test counts executions.
- ``--step3 block``: step3 records that it started, prints ``step3 running`` and
  blocks until its stdin closes (the test SIGKILLs it before that; a stdin that
  closes means the test went away, and the process exits 3 without finishing).
- ``--step3 interrupt``: step3 calls ``interrupt()`` and returns what it resumes with.
- ``--crash-between``: the process SIGKILLs itself between the two stores that end
  step3 under ``durability="sync"``, its task's writes (``put_writes``) and the
  checkpoint after its step (``put``), in the order given, whatever order LangGraph
  submitted them in (LangGraph issue #8039: it hands both to a thread pool and does
  not enforce one). ``writes-first``: step3's writes are stored (acknowledged), then
  the process dies as the checkpoint would be sent. ``checkpoint-first``: step3's
  writes are held back, the checkpoint is stored, and the process dies before the
  writes are sent.

On completion prints ``result <json>``: the state's ``log``, the payload's length and
the pending interrupts' values.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import signal
import sys
import threading
from typing import Annotated, Any, Literal, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from turnkeeper.agent.saver import RemoteSaver, durable_config, durable_run_kwargs

Step3 = Literal["plain", "block", "interrupt"]
Order = Literal["writes-first", "checkpoint-first"]

# ~1 KB of state carried through every checkpoint.
PAYLOAD = "turnkeeper-" * 96
QUESTION = "approve step3?"


class State(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    payload: str


def note(side_file: str, line: str) -> None:
    with open(side_file, "a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


class CrashBetween(RemoteSaver):
    """RemoteSaver that dies between step3's writes and the next checkpoint, in the
    order it is given (see the module's docstring). LangGraph may ask for the
    checkpoint while the writes are still on their way: ``writes-first`` then waits
    until they are acknowledged before it dies."""

    def __init__(self, address: str, order: Order, side_file: str) -> None:
        super().__init__(address)
        self.order, self.side_file = order, side_file
        self.armed = False
        self.stored = threading.Event()
        self.astored = asyncio.Event()

    def _step3(self, writes: Any) -> bool:
        return any(channel == "log" and value == ["step3"] for channel, value in writes)

    def _die(self, what: str) -> None:
        note(self.side_file, f"killed {what}")
        os.kill(os.getpid(), signal.SIGKILL)

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        if not self._step3(writes):
            return super().put_writes(config, writes, task_id, task_path)
        self.armed = True
        if self.order == "writes-first":
            super().put_writes(config, writes, task_id, task_path)
            self.stored.set()
        # checkpoint-first: held back, never sent.

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        if not self._step3(writes):
            return await super().aput_writes(config, writes, task_id, task_path)
        self.armed = True
        if self.order == "writes-first":
            await super().aput_writes(config, writes, task_id, task_path)
            self.astored.set()

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if not self.armed:
            return super().put(config, checkpoint, metadata, new_versions)
        if self.order == "writes-first":
            self.stored.wait()
            self._die("before the checkpoint")
        stored = super().put(config, checkpoint, metadata, new_versions)
        self._die("before the writes")
        return stored

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        if not self.armed:
            return await super().aput(config, checkpoint, metadata, new_versions)
        if self.order == "writes-first":
            await self.astored.wait()
            self._die("before the checkpoint")
        stored = await super().aput(config, checkpoint, metadata, new_versions)
        self._die("before the writes")
        return stored


def saver_for(args: argparse.Namespace) -> RemoteSaver:
    if args.crash_between is None:
        return RemoteSaver(args.address)
    return CrashBetween(args.address, args.crash_between, args.side_file)


def build_graph(
    checkpointer: BaseCheckpointSaver[Any], side_file: str, step3: Step3 = "plain"
) -> CompiledStateGraph[Any]:
    def plain(name: str) -> Any:
        def node(state: State) -> State:
            note(side_file, name)
            return {"log": [name]}

        return node

    def third(state: State) -> State:
        note(side_file, "step3")
        if step3 == "block":
            print("step3 running", flush=True)
            sys.stdin.read()
            os._exit(3)
        if step3 == "interrupt":
            answer = interrupt({"question": QUESTION, "seen": list(state["log"])})
            note(side_file, f"step3 resumed with {json.dumps(answer, sort_keys=True)}")
            return {"log": [f"step3:{json.dumps(answer, sort_keys=True)}"]}
        return {"log": ["step3"]}

    builder = StateGraph(State)
    builder.add_node("step1", plain("step1"))
    builder.add_node("step2", plain("step2"))
    builder.add_node("step3", third)
    builder.add_node("step4", plain("step4"))
    builder.add_edge(START, "step1")
    builder.add_edge("step1", "step2")
    builder.add_edge("step2", "step3")
    builder.add_edge("step3", "step4")
    builder.add_edge("step4", END)
    return builder.compile(checkpointer=checkpointer)


def graph_input(args: argparse.Namespace) -> Any:
    if args.action == "start":
        return {"log": ["in"], "payload": PAYLOAD}
    if args.action == "continue":
        return None
    return Command(resume=json.loads(args.value))


def report(out: dict[str, Any]) -> None:
    result = {
        "log": out.get("log"),
        "payload_len": len(out.get("payload", "")),
        "interrupts": [i.value for i in out.get("__interrupt__", [])],
    }
    print("result " + json.dumps(result, sort_keys=True), flush=True)


def run_sync(args: argparse.Namespace) -> None:
    with saver_for(args) as saver:
        graph = build_graph(saver, args.side_file, args.step3)
        out = graph.invoke(graph_input(args), durable_config(args.thread), **durable_run_kwargs())
    report(out)


async def run_async(args: argparse.Namespace) -> None:
    async with saver_for(args) as saver:
        graph = build_graph(saver, args.side_file, args.step3)
        out = await graph.ainvoke(
            graph_input(args), durable_config(args.thread), **durable_run_kwargs()
        )
    report(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--side-file", required=True)
    parser.add_argument("--step3", choices=["plain", "block", "interrupt"], default="plain")
    parser.add_argument("--api", choices=["sync", "async"], default="sync")
    parser.add_argument("--crash-between", choices=["writes-first", "checkpoint-first"])
    parser.add_argument("action", choices=["start", "continue", "answer"])
    parser.add_argument("value", nargs="?")
    args = parser.parse_args()
    if (args.action == "answer") != (args.value is not None):
        parser.error("a JSON value goes with answer, and only with it")
    if args.api == "sync":
        run_sync(args)
    else:
        asyncio.run(run_async(args))


if __name__ == "__main__":
    main()
