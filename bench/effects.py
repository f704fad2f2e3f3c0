"""The cost of an effect (docs/effects.md): one call of a function through
turnkeeper's effect ledger against the same call made plainly, against a DBOS
`@DBOS.step` and against a Restate `ctx.run`, side by side in one run.

- turnkeeper: a LangGraph node (RemoteSaver, a journaled turn, the service in its
  own process on SQLite) makes N calls of an `@effect` function and times them
  inside the node, policy `retry` (BeginEffect reads, RecordEffect commits the
  outcome) and `park` (BeginEffect commits the intent first); the same node with a
  plain function is the floor;
- DBOS: a workflow making N `@DBOS.step` calls, and one making N plain calls, timed
  inside the workflow (bench/dbos_effects.py, its own process);
- Restate: a handler making N `ctx.run_typed` calls, and one making N plain calls,
  timed inside the handler (bench/restate_effects.py, behind a local restate-server);
- commits: the WAL flushes PostgreSQL makes per effect (`pg_stat_wal.wal_sync`,
  the service on pgserver's PostgreSQL 16), each policy: what "durable" costs in
  commits, whatever the machine's fsync speed.

Each figure is the median of its rounds' per-call seconds.
"""

from __future__ import annotations

import asyncio
import json
import operator
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated, Any, TypedDict

import psycopg
from google.protobuf import struct_pb2
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from turnkeeper.agent.effect import effect
from turnkeeper.agent.effect._snapshot import CONFIG_KEY as SNAPSHOT_KEY
from turnkeeper.agent.effect._snapshot import LedgerSnapshot
from turnkeeper.agent.saver import RemoteSaver, durable_config
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2 as pb

from bench.common import (
    Row,
    Section,
    ServerProcess,
    Size,
    fmt_ratio,
    median,
    paired_ratio,
    ratio,
    scratch_dir,
)
from bench.engines import dbos_missing, restate_ingress, restate_missing

KINDS = ("plain", "retry", "park")


class Acts(TypedDict):
    calls: int
    seconds: Annotated[list[float], operator.add]


def _act(i: int) -> dict[str, Any]:
    return {"i": i}


async def _plain(i: int) -> dict[str, Any]:
    return _act(i)


@effect(name="act-retry", policy="retry")
async def _retry(i: int) -> dict[str, Any]:
    return _act(i)


@effect(name="act-park", policy="park")
async def _park(i: int) -> dict[str, Any]:
    return _act(i)


CALLS: dict[str, Callable[[int], Awaitable[dict[str, Any]]]] = {
    "plain": _plain,
    "retry": _retry,
    "park": _park,
}


def graph(kind: str, saver: RemoteSaver) -> Any:
    call = CALLS[kind]

    async def act(state: Acts) -> dict[str, Any]:
        started = time.perf_counter()
        for i in range(state["calls"]):
            await call(i)
        return {"seconds": [(time.perf_counter() - started) / state["calls"]]}

    builder = StateGraph(Acts)
    builder.add_node("act", act)
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=saver)


async def alternated(
    address: str, restate_url: str | None, calls: int, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Per round, seconds per call of each turnkeeper kind (inside a node of a turn)
    and, with a Restate ingress, of its two handlers, one after the other in the
    same round: a drift of the shared machine between rounds hits both. The first
    round warms up and is dropped."""
    import httpx

    options = ConnectionOptions(target=address)
    ours: dict[str, list[float]] = {kind: [] for kind in KINDS}
    theirs: dict[str, list[float]] = {"plain_s": [], "run_s": []}
    async with (
        AsyncTurnkeeperClient(options) as client,
        RemoteSaver(address) as saver,
        httpx.AsyncClient(base_url=restate_url or "http://unused", timeout=120) as restate,
    ):
        graphs = {kind: graph(kind, saver) for kind in KINDS}
        for _ in range(rounds + 1):
            for kind in KINDS:
                ours[kind].append(await _turn(client, graphs[kind], calls))
            if restate_url is not None:
                for name, handler in (("plain_s", "plain"), ("run_s", "run")):
                    answer = await restate.post(f"/Effects/{handler}", json=calls)
                    answer.raise_for_status()
                    theirs[name].append(float(answer.json()))
    return (
        {kind: values[1:] for kind, values in ours.items()},
        {name: values[1:] for name, values in theirs.items()},
    )


async def _turn(client: AsyncTurnkeeperClient, compiled: Any, calls: int) -> float:
    turn_id, thread_id = f"fx-{uuid.uuid4().hex}", f"th-{uuid.uuid4().hex}"
    await client.start_turn(
        pb.StartTurnRequest(
            turn_id=turn_id,
            thread_id=thread_id,
            agent="bench",
            input=struct_pb2.Value(struct_value=struct_pb2.Struct()),
            replica="bench",
            incarnation="bench",
        )
    )
    config: RunnableConfig = durable_config(thread_id, turn_id, 0)
    # As the bridge runs a turn: with the run's snapshot of the ledger (decision 260).
    config["configurable"][SNAPSHOT_KEY] = LedgerSnapshot()
    out = await compiled.ainvoke({"calls": calls, "seconds": []}, config, durability="sync")
    return float(out["seconds"][-1])


def wal_syncs(database_url: str) -> int:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()
    assert row is not None
    return int(row[0])


def commits_per_effect(data_dir: Path, calls: int, quiet: float) -> dict[str, float]:
    """WAL flushes per call of each kind, the service on PostgreSQL: the flushes of a
    turn of 2N calls less those of a turn of N, over N. What every turn costs (its
    start, its checkpoints, its end) cancels out, and so does the plain call.

    Each reading waits `quiet` seconds after its turn: a backend that reported its
    counts less than a second ago holds the next ones until it has been idle 10 s
    (decision 264). The service's writer keeps one connection busy, so a shorter
    wait moves one turn's flushes into the next reading (decision 268)."""
    from bench.postgres import postgres

    with postgres() as new_database:
        url = new_database()
        with ServerProcess(data_dir, args=["--database-url", url]) as server:
            figures: dict[str, float] = {}

            async def flushes(compiled: Any, client: AsyncTurnkeeperClient, n: int) -> int:
                before = wal_syncs(url)
                await _turn(client, compiled, n)
                await asyncio.sleep(quiet)
                return wal_syncs(url) - before

            async def measure(kind: str) -> None:
                options = ConnectionOptions(target=server.address)
                async with (
                    AsyncTurnkeeperClient(options) as client,
                    RemoteSaver(server.address) as saver,
                ):
                    compiled = graph(kind, saver)
                    await _turn(client, compiled, 2)  # warm up
                    once = await flushes(compiled, client, calls)
                    twice = await flushes(compiled, client, 2 * calls)
                    figures[kind] = (twice - once) / calls

            for kind in ("retry", "park"):
                asyncio.run(measure(kind))
    return figures


def dbos_calls(data_dir: Path, calls: int, rounds: int) -> dict[str, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.dbos_effects",
            "--data-dir",
            str(data_dir),
            "--calls",
            str(calls),
            "--rounds",
            str(rounds),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the DBOS workflows failed: {out.stderr[-2000:]}")
    figures: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return figures


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs"


def run(size: Size) -> Section:
    calls, rounds = size.effect_calls, size.effect_rounds
    section = Section(
        key="effects",
        title="The cost of an effect: turnkeeper's ledger vs a plain call, DBOS and Restate",
        method=(
            f"{calls} calls a round, timed where they are made, {rounds} rounds after one "
            "warm-up round; a figure is the median of the rounds' seconds per call. "
            "turnkeeper's rounds and Restate's alternate (both up at once), and their ratio "
            "is the median of the rounds' ratios (decision 163); DBOS runs after them in "
            "its own process. "
            "turnkeeper: an `@effect` function called in a LangGraph node of a journaled "
            "turn run as the bridge runs it (RemoteSaver, the run's ledger snapshot, the "
            "service in its own process on SQLite, synchronous=FULL), policy `retry` (a "
            "new key runs at once, RecordEffect commits its outcome) and `park` "
            "(BeginEffect commits the intent first); the floor is "
            "the same node calling a plain function. DBOS: `@DBOS.step` calls in a "
            "workflow on its SQLite system database (its own process). Restate: "
            "`ctx.run_typed` calls in a handler (Python SDK on hypercorn) behind a local "
            "restate-server from npm (RocksDB WAL fsync on). Commits: "
            "`pg_stat_wal.wal_sync` around a turn of 2N calls and one of N, with the "
            "service on PostgreSQL 16 (pgserver), the difference over N (what every turn "
            f"costs cancels out), each reading after {size.pg_stats_wait:g} s of quiet "
            "(decision 268)."
        ),
    )
    m = section.metrics
    with ExitStack() as stack:
        data = stack.enter_context(scratch_dir("effects"))
        (data / "sqlite").mkdir()
        others: dict[str, str] = {}
        restate_url: str | None = None
        if (why := restate_missing()) is None:
            (data / "restate").mkdir()
            restate_url = stack.enter_context(restate_ingress(data / "restate"))
        else:
            others["Restate"] = why
        with ServerProcess(data / "sqlite") as server:
            ours, theirs = asyncio.run(alternated(server.address, restate_url, calls, rounds))
        m.update({f"turnkeeper_{kind}_s": median(values) for kind, values in ours.items()})
        if restate_url is not None:
            m.update({f"restate_{name}": median(values) for name, values in theirs.items()})
            m["restate_ratio"] = paired_ratio(ours["retry"], theirs["run_s"])
        if (why := dbos_missing()) is None:
            (data / "dbos").mkdir()
            dbos = dbos_calls(data / "dbos", calls, rounds)
            m.update({f"dbos_{name}": value for name, value in dbos.items()})
        else:
            others["DBOS"] = why
        (data / "pg").mkdir()
        commits = commits_per_effect(data / "pg", calls, size.pg_stats_wait)
        m.update({f"commits_{kind}": value for kind, value in commits.items()})

    plain = m["turnkeeper_plain_s"]
    section.rows += [
        Row("a plain call in a node (the floor)", _us(plain)),
        Row(
            "an effect, policy retry",
            _us(m["turnkeeper_retry_s"]),
            _us(plain),
            fmt_ratio(ratio(m["turnkeeper_retry_s"], plain)),
        ),
        Row(
            "an effect, policy park (intent recorded first)",
            _us(m["turnkeeper_park_s"]),
            _us(plain),
            fmt_ratio(ratio(m["turnkeeper_park_s"], plain)),
        ),
        Row(
            "WAL flushes per effect, retry (PostgreSQL)",
            f"{m['commits_retry']:.2f}",
            target="≤ 1",
            met=m["commits_retry"] <= 1.0,
        ),
        Row(
            "WAL flushes per effect, park (PostgreSQL)",
            f"{m['commits_park']:.2f}",
            target="≤ 2",
            met=m["commits_park"] <= 2.0,
        ),
    ]
    if "dbos_step_s" in m:
        section.rows.append(
            Row(
                "an effect (retry) vs a DBOS `@DBOS.step`",
                _us(m["turnkeeper_retry_s"]),
                _us(m["dbos_step_s"]),
                fmt_ratio(ratio(m["turnkeeper_retry_s"], m["dbos_step_s"])),
            )
        )
    if "restate_run_s" in m:
        versus = m["restate_ratio"]
        section.rows.append(
            Row(
                "an effect (retry) vs a Restate `ctx.run`",
                _us(m["turnkeeper_retry_s"]),
                _us(m["restate_run_s"]),
                fmt_ratio(versus),
                "≤ 1.00\u00d7",
                versus <= 1.0,
            )
        )
    for name, why in others.items():
        section.notes.append(f"{name} was not measured: {why}.")
    return section
