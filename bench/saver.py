"""RemoteSaver against LangGraph's in-process SqliteSaver.

Both sides commit with `synchronous=FULL` (the service's default; set with a
PRAGMA on SqliteSaver's connection) in WAL mode. The graph with no checkpointer is
the floor: what the turn costs with no durability at all.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver
from turnkeeper.agent.saver import RemoteSaver

from bench import turns
from bench.common import (
    Row,
    Section,
    ServerProcess,
    Size,
    cpu_delta,
    cpu_seconds,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    median,
    paired_ratio,
    scratch_dir,
)


@contextmanager
def remote_turn(data_dir: Path) -> Iterator[tuple[Callable[[], None], int]]:
    """A turn through RemoteSaver, and the pid of the service (in its own process)."""
    with ServerProcess(data_dir) as server, RemoteSaver.from_address(server.address) as saver:
        yield turns.graph_turn(turns.build(saver)), server.pid


@contextmanager
def sqlite_turn(data_dir: Path) -> Iterator[Callable[[], None]]:
    conn = sqlite3.connect(data_dir / "sqlite-saver.db", check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        # The service's level: every commit fsyncs the WAL.
        conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn)
        saver.setup()
        yield turns.graph_turn(turns.build(saver))
    finally:
        conn.close()


def run(size: Size) -> Section:
    section = Section(
        key="saver",
        title="RemoteSaver vs in-process SqliteSaver",
        method=(
            f'A 4-node linear graph over ~2 KB of state, `durability="sync"`, a new thread '
            f"per turn. Single: {size.saver_single} turns one after the other, median per "
            f"turn. Concurrent: {size.saver_concurrent} turns on {size.saver_callers} "
            "threads, turns/s. RemoteSaver uses its blocking client; the service runs in its "
            "own process. SqliteSaver shares one connection (its lock serialises every "
            "call). Both: WAL, synchronous=FULL. "
            f"{size.saver_rounds} rounds; values are medians, ratios medians of each round's ratio."
        ),
    )
    single: dict[str, list[float]] = {"floor": [], "sqlite": [], "remote": []}
    conc: dict[str, list[float]] = {"floor": [], "sqlite": [], "remote": []}
    # CPU milliseconds per turn in the concurrent runs: this process (the graph and
    # its checkpointer's client side) and, for RemoteSaver, the service.
    client_ms: dict[str, list[float]] = {"floor": [], "sqlite": [], "remote": []}
    service_ms: list[float] = []
    with scratch_dir("saver") as data_dir:
        floor = turns.graph_turn(turns.build(None))
        with sqlite_turn(data_dir) as sqlite_run, remote_turn(data_dir) as (remote_run, pid):
            runs = {"floor": floor, "sqlite": sqlite_run, "remote": remote_run}
            for round_ in range(size.saver_rounds):
                order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
                for name in order:
                    single[name].append(turns.single(runs[name], size.saver_single))
                for name in order:
                    client, service = time.process_time(), cpu_seconds(pid)
                    conc[name].append(
                        turns.concurrent(runs[name], size.saver_concurrent, size.saver_callers)
                    )
                    per_turn = 1e3 / size.saver_concurrent
                    client_ms[name].append((time.process_time() - client) * per_turn)
                    if name == "remote":
                        used = cpu_delta(service, cpu_seconds(pid))
                        service_ms.append(sum(used.values()) * per_turn)
    s = {k: median(v) for k, v in single.items()}
    c = {k: median(v) for k, v in conc.items()}
    cpu = {k: median(v) for k, v in client_ms.items()}
    section.metrics = (
        {f"single_{k}_s": v for k, v in s.items()}
        | {f"concurrent_{k}_tps": v for k, v in c.items()}
        | {f"client_cpu_ms_per_turn_{k}": v for k, v in cpu.items()}
        | {"service_cpu_ms_per_turn_remote": median(service_ms)}
    )
    single_ratio = paired_ratio(single["remote"], single["sqlite"])
    conc_ratio = paired_ratio(conc["remote"], conc["sqlite"])
    section.metrics |= {"single_ratio": single_ratio, "concurrent_ratio": conc_ratio}
    section.rows = [
        Row(
            "per-turn time, single",
            fmt_ms(s["remote"]),
            f"SqliteSaver {fmt_ms(s['sqlite'])}",
            fmt_ratio(single_ratio),
            "≤ 1.25\u00d7",
            single_ratio <= 1.25,
        ),
        Row(
            f"throughput, {size.saver_callers} concurrent turns",
            fmt_rate(c["remote"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(conc_ratio),
            "≥ 2\u00d7",
            conc_ratio >= 2.0,
        ),
        Row(
            "floor: no checkpointer, single",
            fmt_ms(s["floor"]),
            f"SqliteSaver {fmt_ms(s['sqlite'])}",
            fmt_ratio(paired_ratio(single["floor"], single["sqlite"])),
        ),
        Row(
            f"floor: no checkpointer, {size.saver_callers} concurrent",
            fmt_rate(c["floor"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(paired_ratio(conc["floor"], conc["sqlite"])),
        ),
        Row(
            "CPU per turn, concurrent: graph process",
            f"{cpu['remote']:.1f} ms",
            f"SqliteSaver {cpu['sqlite']:.1f} ms (no checkpointer {cpu['floor']:.1f} ms)",
            fmt_ratio(paired_ratio(client_ms["remote"], client_ms["sqlite"])),
        ),
        Row(
            "CPU per turn, concurrent: the service",
            f"{median(service_ms):.1f} ms",
        ),
    ]
    cores = os.cpu_count() or 1
    section.notes.append(
        f"CPU bound on this machine's {cores} cores: a RemoteSaver turn costs "
        f"{cpu['remote'] + median(service_ms):.1f} ms of CPU (graph process + service), so "
        f"{cores} cores cap it near {1e3 * cores / (cpu['remote'] + median(service_ms)):,.0f} "
        f"turns/s; an in-process SqliteSaver turn costs {cpu['sqlite']:.1f} ms in one "
        "GIL-bound process."
    )
    return section
