"""A 4-node linear graph (step1 → step2 → step3 → step4) run through RemoteSaver,
as a real subprocess, for tests/saver/test_saver_crash.py.

    python saver_four_steps.py --address HOST:PORT --thread T --side-file F
        [--step3 plain|block|interrupt] [--api sync|async]
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

On completion prints ``result <json>``: the state's ``log``, the payload's length and
the pending interrupts' values.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import operator
import os
import sys
from typing import Annotated, Any, Literal, TypedDict

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, interrupt
from turnkeeper.agent.saver import RemoteSaver, durable_config, durable_run_kwargs

Step3 = Literal["plain", "block", "interrupt"]

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
    with RemoteSaver.from_address(args.address) as saver:
        graph = build_graph(saver, args.side_file, args.step3)
        out = graph.invoke(graph_input(args), durable_config(args.thread), **durable_run_kwargs())
    report(out)


async def run_async(args: argparse.Namespace) -> None:
    async with RemoteSaver(args.address) as saver:
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
