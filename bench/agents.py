"""Many agents, one service: 1, 2 and 4 agent processes running turns at once
against one service (SQLite, one writer).

Each agent process runs async 4-step turns through RemoteSaver (its checkpoint
stream per run) with a fixed number of turns in flight. The processes start
together (each warmed up first); the figure is the aggregate turns/s from the go
to the last process done, and the service's CPU per turn over that span.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from bench.common import (
    REPO_BENCH,
    Row,
    Section,
    ServerProcess,
    Size,
    cpu_delta,
    cpu_seconds,
    fmt_rate,
    median,
    scratch_dir,
)


def _round(address: str, pid: int, procs: int, size: Size) -> tuple[float, float, float]:
    """(aggregate turns/s, service CPU ms per turn, agents' CPU ms per turn)."""
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.agent_worker",
                address,
                str(size.agents_turns),
                str(size.agents_callers),
            ],
            cwd=REPO_BENCH.parent,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "ready":
                raise RuntimeError("an agent process did not start")
        service = cpu_seconds(pid)
        started = time.perf_counter()
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        results = []
        for worker in workers:
            assert worker.stdout is not None
            results.append(json.loads(worker.stdout.readline()))
        elapsed = time.perf_counter() - started
        used = sum(cpu_delta(service, cpu_seconds(pid)).values())
    finally:
        for worker in workers:
            worker.wait(timeout=60)
    total = procs * size.agents_turns
    agents_ms = sum(r["cpu"] for r in results) * 1e3 / total
    return total / elapsed, used * 1e3 / total, agents_ms


def run(size: Size) -> Section:
    section = Section(
        key="agents",
        title="Many agents, one service",
        method=(
            f"{', '.join(map(str, size.agents_procs))} agent processes at once, each "
            f"running {size.agents_turns} async 4-step turns through RemoteSaver "
            f"(stream per run) with {size.agents_callers} in flight, against one service "
            "process on SQLite; aggregate turns/s from the go to the last process done. "
            f"{size.agents_rounds} rounds; values are medians."
        ),
    )
    rates: dict[int, list[float]] = {n: [] for n in size.agents_procs}
    service_ms: dict[int, list[float]] = {n: [] for n in size.agents_procs}
    agent_ms: dict[int, list[float]] = {n: [] for n in size.agents_procs}
    with scratch_dir("agents") as data_dir, ServerProcess(data_dir) as server:
        for _ in range(size.agents_rounds):
            for n in size.agents_procs:
                rate, svc, agents = _round(server.address, server.pid, n, size)
                rates[n].append(rate)
                service_ms[n].append(svc)
                agent_ms[n].append(agents)
    first = size.agents_procs[0]
    for n in size.agents_procs:
        rate, svc, agents = median(rates[n]), median(service_ms[n]), median(agent_ms[n])
        section.metrics |= {
            f"turns_per_s_{n}": rate,
            f"service_cpu_ms_per_turn_{n}": svc,
            f"agent_cpu_ms_per_turn_{n}": agents,
        }
        section.rows.append(
            Row(
                f"{n} agent process{'es' if n > 1 else ''}",
                fmt_rate(rate, " turns/s"),
                f"{first} process: {fmt_rate(median(rates[first]), ' turns/s')}",
                f"{rate / median(rates[first]):.2f}\u00d7",
            )
        )
        section.rows.append(
            Row(
                f"{n} agent process{'es' if n > 1 else ''}: CPU per turn",
                f"service {svc:.1f} ms",
                f"agents {agents:.1f} ms",
            )
        )
    last = size.agents_procs[-1]
    svc, agents = median(service_ms[last]), median(agent_ms[last])
    service_cap = 1e3 / max(svc, 1e-9)
    per_core = 1e3 / max(agents, 1e-9)

    def paper(cores: int) -> float:
        # One core for the service, the rest running agents.
        return min(service_cap, (cores - 1) * per_core)

    section.metrics |= {"paper_16_cores": paper(16), "paper_64_cores": paper(64)}
    section.notes.append(
        f"On paper, from the CPU per turn measured with {last} agent processes (service "
        f"{svc:.1f} ms, agents {agents:.1f} ms per turn): one service process is bound "
        f"near {service_cap:,.0f} turns/s by its own CPU (one event loop, one GIL), and "
        f"feeding it takes about {1 + agents / max(svc, 1e-9):.0f} cores; 16 cores would "
        f"hold about {paper(16):,.0f} turns/s, 64 cores about {paper(64):,.0f}. Past "
        "that, more serving processes (or PostgreSQL replicas) are the lever. This "
        f"machine has {os.cpu_count() or 1} cores, shared with the service and other work."
    )
    return section
