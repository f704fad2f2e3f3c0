"""The replay check for CI (docs/versions.md): can new graph code continue the threads
a service holds? Without running any node: the new graph is loaded and compiled, its
shape compared, thread by thread, with the stamp of the thread's newest checkpoint
under the ``compatible`` rule (turnkeeper._graph_versions).

turnkeeper threads export --agent A [--output FILE]
    the agent's threads with their newest checkpoint's stamp, as JSON (a file a
    pipeline keeps, or checks right away)
turnkeeper replay-check (--graph MODULE:ATTR | --langgraph-json FILE [--graph-name N])
                        (--threads FILE | --agent A) [--strict] [--json]
    exit 0 when every thread can continue on the new graph, 1 when one cannot (or,
    with --strict, when one cannot be checked), 2 on bad input
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from turnkeeper._graph_versions import Stamp, describe, incompatibilities, stamp_of_metadata
from turnkeeper._object_spec import parse_object_spec
from turnkeeper.client import TurnkeeperClient
from turnkeeper.operator import _render as render
from turnkeeper.v1 import checkpoints_pb2, turns_pb2

FORMAT: Final = "turnkeeper.threads/1"
# Turns per ListTurns page; the service allows 1000.
PAGE: Final = 500
EXIT_CANNOT: Final = 1
COLUMNS: Final = ("THREAD", "TURN", "STATE", "WRITTEN BY", "RESULT")

ClientOf = Callable[[argparse.Namespace], contextlib.AbstractContextManager[TurnkeeperClient]]


def add_commands(
    commands: Any, thread_verbs: Any, parents: list[argparse.ArgumentParser], client_of: ClientOf
) -> None:
    """`replay-check`, and `export` under `thread_verbs` (the `threads` command's)."""
    export = thread_verbs.add_parser(
        "export",
        parents=parents,
        help="an agent's threads with their newest checkpoint's graph version, as JSON",
    )
    export.add_argument("--agent", required=True, help="the agent whose threads to export")
    export.add_argument(
        "--output", "-o", type=Path, default=None, metavar="FILE", help="write here (stdout)"
    )

    def exporting(args: argparse.Namespace) -> int:
        with client_of(args) as client:
            document = export_threads(client, args.agent)
        body = json.dumps(document, indent=2, sort_keys=True) + "\n"
        if args.output is None:
            sys.stdout.write(body)
        else:
            args.output.write_text(body, encoding="utf-8")
            print(f"{len(document['threads'])} thread(s) written to {args.output}", flush=True)
        return 0

    export.set_defaults(handler=exporting)

    check = commands.add_parser(
        "replay-check",
        parents=parents,
        help="can new graph code continue the stored threads? (for CI; runs no node)",
    )
    graph = check.add_mutually_exclusive_group(required=True)
    graph.add_argument("--graph", metavar="MODULE:ATTR", help="the new graph (or path.py:attr)")
    graph.add_argument("--langgraph-json", type=Path, metavar="FILE", help="a langgraph.json")
    check.add_argument(
        "--graph-name",
        default="",
        help="which graph of the langgraph.json (default: the agent's name, or its only graph)",
    )
    source = check.add_mutually_exclusive_group(required=True)
    source.add_argument("--threads", type=Path, metavar="FILE", help="a `threads export` file")
    source.add_argument("--agent", help="read the agent's threads from the service now")
    check.add_argument(
        "--strict",
        action="store_true",
        help="also fail on a thread whose checkpoint has no graph version (written by an "
        "SDK from before versions), which cannot be checked",
    )

    def checking(args: argparse.Namespace) -> int:
        if args.threads is not None:
            document = read_export(args.threads)
        else:
            with client_of(args) as client:
                document = export_threads(client, args.agent)
        shape = load_shape(args, document.get("agent") or "")
        results = [check_thread(t, shape) for t in document["threads"]]
        if args.json:
            print(render.dumps({"threads": [r.as_dict() for r in results]}), flush=True)
        else:
            print(report(results), flush=True)
        failed = [
            r for r in results if r.verdict == CANNOT or (args.strict and r.verdict == UNCHECKED)
        ]
        return EXIT_CANNOT if failed else 0

    check.set_defaults(handler=checking)


# -- the export ------------------------------------------------------------------------


def export_threads(client: TurnkeeperClient, agent: str) -> dict[str, Any]:
    """The agent's threads (newest turn of each) with their newest root checkpoint's
    stamp; a thread with no checkpoint has none."""
    newest: dict[str, turns_pb2.Turn] = {}
    request = turns_pb2.ListTurnsRequest(agent=agent, page_size=PAGE)
    while True:
        page = client.list_turns(request)
        for turn in page.turns:  # newest first
            newest.setdefault(turn.thread_id, turn)
        if not page.next_page_token:
            break
        request.page_token = page.next_page_token
    threads = []
    for thread_id, turn in sorted(newest.items()):
        found = client.get_checkpoint(
            checkpoints_pb2.GetCheckpointRequest(thread_id=thread_id, checkpoint_ns="")
        )
        stamp = None
        checkpoint_id = ""
        if found.found:
            checkpoint_id = found.checkpoint.ref.checkpoint_id
            stamp = stamp_of_metadata(found.checkpoint.metadata_json)
        threads.append(
            {
                "thread_id": thread_id,
                "turn_id": turn.turn_id,
                "state": render.state_name(turn.state),
                "checkpoint_id": checkpoint_id,
                "stamp": stamp.to_json() if stamp is not None else None,
            }
        )
    return {"format": FORMAT, "agent": agent, "exported_at": time.time(), "threads": threads}


def read_export(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{path}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ValueError(
            f"{path}: not a `turnkeeper threads export` file (format {FORMAT!r} expected)"
        )
    if not isinstance(document.get("threads"), list):
        raise ValueError(f'{path}: no "threads" list')
    return document


# -- the graph ---------------------------------------------------------------------------


def load_shape(args: argparse.Namespace, agent: str) -> dict[str, Any]:
    """The new graph's shape: loaded and compiled, never run. Needs the `agent` extra."""
    try:
        from turnkeeper.agent._fingerprint import GraphVersion
        from turnkeeper.agent.host._config import GraphSpec, read_config
        from turnkeeper.agent.host._loader import load_graph
        from turnkeeper.agent.host._run import prepare
    except ImportError as exc:
        raise ValueError(
            f"the replay check loads the graph with LangGraph: pip install 'turnkeeper[agent]' "
            f"({exc})"
        ) from None
    from langgraph.graph import StateGraph

    if args.graph:
        named = parse_object_spec(args.graph, what="--graph")
        module = str(named.file()) if named.is_file else named.module
        spec = GraphSpec("graph", module, named.attribute)
    else:
        config = read_config(args.langgraph_json)
        prepare(config)
        names = [g.name for g in config.graphs]
        name = args.graph_name or (agent if agent in names else "")
        if not name and len(names) == 1:
            name = names[0]
        specs = [g for g in config.graphs if g.name == name]
        if not specs:
            raise ValueError(
                f"{args.langgraph_json}: which graph? --graph-name one of {', '.join(names)}"
            )
        spec = specs[0]
    graph = asyncio.run(load_graph(spec))
    compiled = graph.compile() if isinstance(graph, StateGraph) else graph
    return dict(GraphVersion.of(compiled).shape)


# -- the check ------------------------------------------------------------------------


OK, CANNOT, UNCHECKED = "ok", "cannot continue", "unchecked"


@dataclass(frozen=True)
class Result:
    thread_id: str
    turn_id: str
    state: str
    written_by: str
    verdict: str
    reasons: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "thread_id": self.thread_id,
            "turn_id": self.turn_id,
            "state": self.state,
            "written_by": self.written_by,
            "verdict": self.verdict,
            "reasons": list(self.reasons),
        }


def check_thread(thread: dict[str, Any], shape: dict[str, Any]) -> Result:
    stamp = Stamp.from_json(thread.get("stamp"))
    base = (str(thread.get("thread_id")), str(thread.get("turn_id")), str(thread.get("state")))
    if not thread.get("checkpoint_id"):
        return Result(*base, "-", OK, ("no checkpoint: a new turn starts from its input",))
    if stamp is None:
        return Result(
            *base,
            "-",
            UNCHECKED,
            ("its newest checkpoint has no graph version (written before versions)",),
        )
    reasons = tuple(incompatibilities(stamp, shape))
    return Result(
        *base, describe(stamp.fingerprint, stamp.label), CANNOT if reasons else OK, reasons
    )


def report(results: list[Result]) -> str:
    if not results:
        return "no threads"
    rows = [[r.thread_id, r.turn_id, r.state, r.written_by, r.verdict.upper()] for r in results]
    lines = [render.table(COLUMNS, rows)]
    for r in results:
        if r.verdict != OK:
            lines += [f"{r.thread_id}: {reason}" for reason in r.reasons]
    counts = {v: sum(1 for r in results if r.verdict == v) for v in (OK, CANNOT, UNCHECKED)}
    lines.append(
        f"{len(results)} thread(s): {counts[OK]} can continue, {counts[CANNOT]} cannot, "
        f"{counts[UNCHECKED]} unchecked"
    )
    return "\n".join(lines)
