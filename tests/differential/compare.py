"""What the differential suite compares, and its allow-list.

A driver's raw observation (driver.py, js/driver.mjs) is reduced, per scenario and
run, to what a client acts on: the event names in their order, the key paths of each
event's payloads (recursively; ids and timestamps normalised), an error if the run was
refused, and after the runs the thread's final state, its status and its runs'
statuses; and the assistant a scenario creates, if it does. Two reductions differ by
named differences, `<run>: events`, `<run>: keys missing from <event>`,
`<run>: keys extra in <event>`, `<run>: error`, `create assistant: error`,
`create assistant: keys missing`, `create assistant: keys extra`, `state`,
`thread status`, `run statuses`; docs/langgraph-api.md's allow-list names the
ones that are known, with a reason."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[2] / "docs" / "langgraph-api.md"
SCENARIOS = Path(__file__).resolve().parent / "scenarios.json"
MARKER = "<!-- differential allow-list -->"
# The TypeScript project's (graphs_ts/ against LangGraph.js's dev server).
MARKER_TS = "<!-- differential allow-list: typescript -->"
CLIENTS = ("python", "js")
# A scenario's first step when it creates its own assistant (scenarios.json's
# `create_assistant`), named in differences as a run is.
CREATE = "create assistant"

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
HEX_ID = re.compile(r"\b[0-9a-f]{32}\b")
TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?")
# Values that name the server rather than the run (its address, its versions).
SERVER_KEYS = frozenset({"langgraph_api_url", "langgraph_api_version", "langgraph_version"})


def scrub(text: str) -> str:
    """Ids and timestamps replaced by what they are."""
    return TIMESTAMP.sub("<ts>", HEX_ID.sub("<id>", UUID.sub("<id>", text)))


def normalise(value: Any) -> Any:
    """`value` with every id and timestamp, in keys and in strings, replaced."""
    if isinstance(value, dict):
        return {
            scrub(k): "<server>" if k in SERVER_KEYS else normalise(v) for k, v in value.items()
        }
    if isinstance(value, list):
        return [normalise(v) for v in value]
    if isinstance(value, str):
        return scrub(value)
    return value


def key_paths(value: Any, prefix: str = "") -> set[str]:
    """The payload's shape: the path of every leaf (`a.b[].c`), an empty dict as `{}`,
    an empty list as `[]`."""
    if isinstance(value, dict):
        if not value:
            return {prefix + "{}"}
        found: set[str] = set()
        for k, v in value.items():
            found |= key_paths(v, f"{prefix}.{scrub(k)}" if prefix else scrub(k))
        return found
    if isinstance(value, list):
        if not value:
            return {prefix + "[]"}
        found = set()
        for v in value:
            found |= key_paths(v, prefix + "[]")
        return found
    return {prefix or "."}


def reduce_run(run: dict[str, Any]) -> dict[str, Any]:
    events = [scrub(name) for name, _ in run["parts"]]
    keys: dict[str, set[str]] = {}
    for name, data in run["parts"]:
        keys.setdefault(scrub(name), set()).update(key_paths(data))
    return {"events": events, "keys": keys, "error": run["error"]}


def reduce(observed: dict[str, Any]) -> dict[str, Any]:
    """A driver's observation, reduced to what is compared."""
    reduced: dict[str, Any] = {}
    for name, scenario in observed.items():
        state = scenario["state"]
        interrupts = [i.get("value") for t in state.get("tasks") or [] for i in t["interrupts"]]
        made = scenario.get("assistant")
        reduced[name] = {
            "assistant": None
            if made is None
            else {"error": made["error"], "keys": key_paths(made["data"])},
            "runs": {run: reduce_run(r) for run, r in scenario["runs"].items()},
            "state": normalise(
                {"values": state["values"], "next": state["next"], "interrupts": interrupts}
            ),
            "thread status": scenario["thread_status"],
            "run statuses": scenario["run_statuses"],
        }
    return reduced


def _events(events: list[str]) -> str:
    """An event sequence, runs of one name collapsed (`messages*7`)."""
    out: list[str] = []
    for name in events:
        if out and out[-1].split("*")[0] == name:
            head, _, n = out[-1].partition("*")
            out[-1] = f"{head}*{int(n or 1) + 1}"
        else:
            out.append(name)
    return " ".join(out) or "(none)"


def differences(reference: dict[str, Any], ours: dict[str, Any]) -> dict[tuple[str, str], str]:
    """Every difference between two reduced observations, as (scenario, difference)
    -> what it is, reference first."""
    found: dict[tuple[str, str], str] = {}
    for name, ref in reference.items():
        got = ours.get(name)
        if got is None:
            found[(name, "scenario")] = "not observed"
            continue
        if ref["assistant"] is not None and got["assistant"] is not None:
            r, g = ref["assistant"], got["assistant"]
            if r["error"] != g["error"]:
                found[(name, f"{CREATE}: error")] = f"{r['error']} vs {g['error']}"
            elif r["keys"] - g["keys"]:
                found[(name, f"{CREATE}: keys missing")] = ", ".join(sorted(r["keys"] - g["keys"]))
            if r["error"] == g["error"] and g["keys"] - r["keys"]:
                found[(name, f"{CREATE}: keys extra")] = ", ".join(sorted(g["keys"] - r["keys"]))
        for run, r in ref["runs"].items():
            g = got["runs"][run]
            if r["error"] != g["error"]:
                found[(name, f"{run}: error")] = f"{r['error']} vs {g['error']}"
            if r["events"] != g["events"]:
                found[(name, f"{run}: events")] = (
                    f"{_events(r['events'])} vs {_events(g['events'])}"
                )
            for event in sorted(set(r["keys"]) & set(g["keys"])):
                missing = r["keys"][event] - g["keys"][event]
                extra = g["keys"][event] - r["keys"][event]
                if missing:
                    found[(name, f"{run}: keys missing from {event}")] = ", ".join(sorted(missing))
                if extra:
                    found[(name, f"{run}: keys extra in {event}")] = ", ".join(sorted(extra))
        for aspect in ("state", "thread status", "run statuses"):
            if ref[aspect] != got[aspect]:
                found[(name, aspect)] = f"{ref[aspect]!r} vs {got[aspect]!r}"
    return found


# -- the allow-list ------------------------------------------------------------------------


@dataclass(frozen=True)
class Allowed:
    """One row of docs/langgraph-api.md's allow-list. `scenario` may be a pattern
    (`interrupt*`, fnmatch) for a difference that several scenarios share."""

    scenario: str
    client: str  # "python", "js" or "both"
    difference: str
    why: str

    def clients(self) -> tuple[str, ...]:
        return CLIENTS if self.client == "both" else (self.client,)

    def covers(self, client: str, scenario: str, difference: str) -> bool:
        return (
            client in self.clients()
            and difference == self.difference
            and fnmatchcase(scenario, self.scenario)
        )

    def targets(self, scenarios: dict[str, list[str]]) -> list[str]:
        """The scenarios this row speaks of: those its pattern matches that have the
        run its difference names."""
        run, sep, _ = self.difference.partition(": ")
        return [
            name
            for name, runs in scenarios.items()
            if fnmatchcase(name, self.scenario) and (not sep or run in runs)
        ]


def _escaped(text: str) -> str:
    """A table cell's text with its own `|` written as Markdown escapes it."""
    return text.replace("|", "\\|")


def _cell(text: str) -> str:
    return text.strip().strip("`").strip()


def allow_list(doc: Path = DOC, marker: str = MARKER) -> list[Allowed]:
    """The table after an allow-list marker in docs/langgraph-api.md (MARKER: the
    Python project's, MARKER_TS: the TypeScript project's)."""
    lines = doc.read_text().splitlines()
    start = lines.index(marker) + 1
    rows: list[Allowed] = []
    for line in lines[start:]:
        if not line.strip():
            if rows:
                break
            continue
        if not line.startswith("|"):
            break
        # A cell's own `|` (a namespaced event's name) is written `\|`, as Markdown has it.
        inner = line.strip().removeprefix("|").removesuffix("|")
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]
        if cells[0].lower() == "scenario" or set(cells[0]) <= set("-: "):
            continue
        if len(cells) != 4:
            raise ValueError(
                f"allow-list row needs 4 cells (scenario|client|difference|why): {line}"
            )
        scenario, client, difference, why = cells
        row = Allowed(_cell(scenario), _cell(client), _cell(difference), why)
        if row.client not in (*CLIENTS, "both"):
            raise ValueError(f"allow-list row's client is python, js or both: {line}")
        if not row.why:
            raise ValueError(f"allow-list row without its reason: {line}")
        rows.append(row)
    return rows


def scenario_runs() -> dict[str, list[str]]:
    """Each scenario of scenarios.json with its runs' names."""
    found = json.loads(SCENARIOS.read_text())["scenarios"]
    return {
        s["name"]: [*([CREATE] if "create_assistant" in s else []), *(r["name"] for r in s["runs"])]
        for s in found
    }


@dataclass
class Verdict:
    unexpected: dict[tuple[str, str, str], str]  # (client, scenario, difference) -> detail
    stale: dict[Allowed, list[str]]  # rows that no longer differ -> where (client scenario)

    def ok(self) -> bool:
        return not self.unexpected and not self.stale


def judge(
    observed: dict[str, dict[tuple[str, str], str]],
    allowed: list[Allowed],
    scenarios: dict[str, list[str]] | None = None,
) -> Verdict:
    """`observed`: per client that ran, its differences. A difference no row allows
    is unexpected. A row is stale if, on a client it names that ran, a scenario it
    speaks of does not show its difference, or it speaks of no scenario at all."""
    scenarios = scenario_runs() if scenarios is None else scenarios
    unexpected: dict[tuple[str, str, str], str] = {}
    for client, found in observed.items():
        for (scenario, difference), detail in found.items():
            if not any(a.covers(client, scenario, difference) for a in allowed):
                unexpected[(client, scenario, difference)] = detail
    stale: dict[Allowed, list[str]] = {}
    for a in allowed:
        targets = a.targets(scenarios)
        if not targets:
            stale[a] = ["(no scenario)"]
            continue
        gone = [
            f"{client} {name}"
            for client in a.clients()
            if client in observed
            for name in targets
            if (name, a.difference) not in observed[client]
        ]
        if gone:
            stale[a] = gone
    return Verdict(unexpected, stale)


def rows(observed: dict[str, dict[tuple[str, str], str]], allowed: list[Allowed]) -> list[str]:
    """The allow-list that `observed` calls for, as table rows: a row of `allowed` that
    covers a difference stands for it (a pattern row once), any other difference gets a
    row of its own to give a reason; under each row, what differs, reference first."""
    by_key: dict[tuple[str, str], dict[str, str]] = {}
    for client, found in observed.items():
        for key, detail in found.items():
            by_key.setdefault(key, {})[client] = detail
    table: dict[str, list[str]] = {}
    for (scenario, difference), details in sorted(by_key.items()):
        row = next(
            (a for a in allowed if all(a.covers(c, scenario, difference) for c in details)),
            None,
        )
        if row is None:
            client = "both" if set(details) == set(CLIENTS) else next(iter(details))
            line = f"| {scenario} | {client} | `{_escaped(difference)}` | (new: say why) |"
        else:
            line = f"| {row.scenario} | {row.client} | `{_escaped(row.difference)}` | {row.why} |"
        table.setdefault(line, []).extend(
            f"    {c} {scenario}: {detail}" for c, detail in sorted(details.items())
        )
    out = []
    for line, shown in table.items():
        out += [line, *shown]
    return out
