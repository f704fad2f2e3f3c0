"""`turnkeeper agents`: each agent's live replicas with the graph versions they serve,
its version policy, and the turns no live replica may take (TurnService/ListAgents);
`turnkeeper agents migrate` moves waiting turns to another version on purpose
(TurnService/MigrateTurns, recorded in the audit log). docs/versions.md.

turnkeeper agents [--agent A] [--json]
turnkeeper agents migrate AGENT --to VERSION [--from FINGERPRINT] [--turn ID ...] [--dry-run]
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from typing import Any, Final

from turnkeeper._graph_versions import describe, short
from turnkeeper.client import TurnkeeperClient
from turnkeeper.operator import _render as render
from turnkeeper.v1 import turns_pb2

REPLICA_COLUMNS: Final = ("REPLICA", "INCARNATION", "VERSION", "FINGERPRINT", "ANNOUNCED")
WAITING_COLUMNS: Final = ("TURN", "THREAD", "STATE", "WAITS FOR")

ClientOf = Callable[[argparse.Namespace], contextlib.AbstractContextManager[TurnkeeperClient]]


def add_command(commands: Any, parents: list[argparse.ArgumentParser], client_of: ClientOf) -> None:
    agents = commands.add_parser(
        "agents",
        parents=parents,
        help="each agent's replicas and graph versions, and the turns waiting for a version",
    )
    agents.add_argument("--agent", default="", help="only this agent")
    verbs = agents.add_subparsers(dest="verb", metavar="VERB")
    migrate = verbs.add_parser(
        "migrate",
        parents=parents,
        help="move an agent's waiting or parked turns to a graph version a replica serves",
    )
    migrate.add_argument("agent_name", metavar="AGENT")
    migrate.add_argument(
        "--to",
        required=True,
        metavar="VERSION",
        help="the version to move to: a live replica's fingerprint, a unique prefix of "
        "one, or its label",
    )
    migrate.add_argument(
        "--from",
        dest="from_fingerprint",
        default="",
        metavar="FINGERPRINT",
        help="only turns waiting for this version (default: every waiting turn)",
    )
    migrate.add_argument(
        "--turn",
        dest="turn_ids",
        action="append",
        default=[],
        metavar="ID",
        help="only this turn; repeatable",
    )
    migrate.add_argument(
        "--dry-run", action="store_true", help="say which turns would move; move none"
    )

    def listing(args: argparse.Namespace) -> int:
        with client_of(args) as client:
            found = client.list_agents(turns_pb2.ListAgentsRequest(agent=args.agent)).agents
        if args.json:
            print(render.dumps({"agents": [agent_dict(a) for a in found]}), flush=True)
        else:
            print(text(list(found)), flush=True)
        return 0

    def migrating(args: argparse.Namespace) -> int:
        with client_of(args) as client:
            live = client.list_agents(turns_pb2.ListAgentsRequest(agent=args.agent_name)).agents
            target = resolve(args.to, list(live))
            moved = client.migrate_turns(
                turns_pb2.MigrateTurnsRequest(
                    agent=args.agent_name,
                    to_fingerprint=target,
                    from_fingerprint=args.from_fingerprint,
                    turn_ids=args.turn_ids,
                    dry_run=args.dry_run,
                )
            ).turn_ids
        if args.json:
            print(render.dumps({"to": target, "dry_run": args.dry_run, "turn_ids": list(moved)}))
            return 0
        verb = "would move" if args.dry_run else "moved"
        print(f"{verb} {len(moved)} turn(s) to {short(target)}", flush=True)
        for turn_id in moved:
            print(f"  {turn_id}", flush=True)
        return 0

    agents.set_defaults(handler=listing)
    migrate.set_defaults(handler=migrating)


def resolve(wanted: str, agents: list[turns_pb2.AgentVersions]) -> str:
    """The fingerprint `wanted` names among the agent's live replicas: itself, a
    unique prefix, or a label. ValueError (exit 2) saying what is live otherwise."""
    versions = {(r.graph.fingerprint, r.graph.label) for a in agents for r in a.replicas}
    matches = {
        fp
        for fp, label in versions
        if fp and (fp.startswith(wanted.lower()) or (label and label == wanted))
    }
    if len(wanted) == 64 and not matches:
        return wanted  # the service says why it cannot move turns there
    if len(matches) == 1:
        return matches.pop()
    live = ", ".join(sorted(describe(fp, label) for fp, label in versions if fp)) or "none"
    if not matches:
        raise ValueError(f"no live replica serves a version {wanted!r}; live versions: {live}")
    raise ValueError(f"{wanted!r} names several live versions: {live}; give more of one")


def agent_dict(agent: turns_pb2.AgentVersions) -> dict[str, Any]:
    return {
        "agent": agent.agent,
        "policy": agent.policy,
        "replicas": [
            {
                "replica": r.replica,
                "incarnation": r.incarnation,
                "fingerprint": r.graph.fingerprint,
                "label": r.graph.label,
                "announced_at": render.time_text(r.announced_at),
            }
            for r in agent.replicas
        ],
        "waiting": [
            {
                "turn_id": w.turn_id,
                "thread_id": w.thread_id,
                "state": render.state_name(w.state),
                "fingerprint": w.waiting_for.fingerprint,
                "label": w.waiting_for.label,
                "detail": w.detail,
            }
            for w in agent.waiting
        ],
    }


def text(agents: list[turns_pb2.AgentVersions]) -> str:
    if not agents:
        return "no agents announced"
    blocks = []
    for agent in agents:
        lines = [f"{agent.agent}  (version policy {agent.policy})"]
        if agent.replicas:
            rows = [
                [
                    r.replica,
                    r.incarnation,
                    r.graph.label or "-",
                    short(r.graph.fingerprint) or "(none: an SDK from before versions)",
                    render.time_text(r.announced_at) or "-",
                ]
                for r in agent.replicas
            ]
            lines.append(render.table(REPLICA_COLUMNS, rows))
        else:
            lines.append("no live replicas")
        if agent.waiting:
            lines.append(f"{len(agent.waiting)} turn(s) no live replica may take:")
            rows = [
                [
                    w.turn_id,
                    w.thread_id,
                    render.state_name(w.state),
                    describe(w.waiting_for.fingerprint, w.waiting_for.label),
                ]
                for w in agent.waiting
            ]
            lines.append(render.table(WAITING_COLUMNS, rows))
            lines.append(
                "start a replica of that version, or check the turns against a running "
                "version with `turnkeeper replay-check` and move them with "
                "`turnkeeper agents migrate`"
            )
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
