"""TurnStatus against the standard gRPC health Check on the same server.

Both go through the same channel, interceptor and event loop; the difference is
what TurnStatus does on top: validate the id, look the turn's status up (on SQLite
in the cache the writer keeps exact, decision 148, else its row) and build the
answer. Every call after the first of a turn is a cache hit here, as for a panel
asking about the same turn on each idle gap; nothing writes during the run. Closed loop: N callers each issue the next call as soon as the
last one answered (throughput, p50/p99). Open loop: calls are sent at a fixed rate
whatever the answers do (latency at a realistic load, no coordinated omission).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

from bench import populate
from bench.common import (
    Row,
    Section,
    ServerProcess,
    Size,
    call_rows,
    cpu_delta,
    cpu_seconds,
    fmt_ms,
    fmt_ratio,
    median,
    paired_ratio,
    percentile,
    ratio,
    scratch_dir,
)

TURNS = 1_000

Call = Callable[[], Awaitable[object]]


def _calls(channel: aio.Channel) -> dict[str, Call]:
    turns = turns_pb2_grpc.TurnServiceStub(channel)
    health = health_pb2_grpc.HealthStub(channel)
    spec = populate.TurnSpec(TURNS)
    ids = [populate.turn_id(spec, i) for i in range(TURNS)]
    check = health_pb2.HealthCheckRequest(service="")

    def status() -> Awaitable[object]:
        request = turns_pb2.TurnStatusRequest(turn_id=random.choice(ids))
        return turns.TurnStatus(request)

    def healthy() -> Awaitable[object]:
        return health.Check(check)  # type: ignore[no-any-return]

    return {"health": healthy, "status": status}


async def closed_loop(call: Call, callers: int, seconds: float) -> tuple[float, list[float]]:
    """(calls per second, latencies) with `callers` callers for `seconds`."""
    latencies: list[float] = []
    end = time.perf_counter() + seconds

    async def caller() -> None:
        while True:
            t0 = time.perf_counter()
            if t0 >= end:
                return
            await call()
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return len(latencies) / (time.perf_counter() - started), latencies


async def open_loop(call: Call, rate: float, seconds: float) -> tuple[list[float], float]:
    """(latencies, worst lateness of a send) for calls sent every 1/rate seconds."""
    latencies: list[float] = []
    lateness = 0.0
    pending: set[asyncio.Task[None]] = set()

    async def one() -> None:
        t0 = time.perf_counter()
        await call()
        latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    for i in range(int(rate * seconds)):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        lateness = max(lateness, time.perf_counter() - due)
        task = asyncio.create_task(one())
        pending.add(task)
        task.add_done_callback(pending.discard)
    await asyncio.gather(*pending)
    return latencies, lateness


async def _measure(address: str, pid: int, size: Size, with_open_loop: bool) -> dict[str, float]:
    out: dict[str, float] = {}
    async with aio.insecure_channel(address) as channel:
        calls = _calls(channel)
        # Warm up both paths (connection, SQLite page cache, code paths).
        for call in calls.values():
            await closed_loop(call, size.status_callers, min(1.0, size.status_seconds))
        per: dict[str, dict[str, list[float]]] = {
            k: {"rps": [], "p50": [], "p99": [], "cpu_us": []} for k in calls
        }
        for round_ in range(size.status_rounds):
            # Alternate which goes first, so a drift of the machine hits both alike.
            order = list(calls) if round_ % 2 == 0 else list(reversed(calls))
            for name in order:
                cpu = cpu_seconds(pid)
                rps, lat = await closed_loop(calls[name], size.status_callers, size.status_seconds)
                used = sum(cpu_delta(cpu, cpu_seconds(pid)).values())
                per[name]["cpu_us"].append(used / len(lat) * 1e6)
                per[name]["rps"].append(rps)
                per[name]["p50"].append(percentile(lat, 50))
                per[name]["p99"].append(percentile(lat, 99))
        for name, figures in per.items():
            for key, values in figures.items():
                out[f"{name}_{key}"] = median(values)
        for key in ("rps", "cpu_us", "p50", "p99"):
            out[f"{key}_ratio"] = paired_ratio(per["status"][key], per["health"][key])
        for name in ("health", "status") if with_open_loop else ():
            lat, late = await open_loop(calls[name], size.open_loop_rate, size.open_loop_seconds)
            out[f"{name}_open_p50"] = percentile(lat, 50)
            out[f"{name}_open_p99"] = percentile(lat, 99)
            out[f"{name}_open_late"] = late
    return out


def run(size: Size) -> Section:
    section = Section(
        key="status",
        title="TurnStatus vs the gRPC health Check",
        method=(
            f"The service runs in its own process (`python -m turnkeeper_server`, no NATS) "
            f"with {TURNS:,} journaled turns; the load generator is this process, one "
            f"grpc.aio channel. Closed loop: {size.status_callers} concurrent callers, "
            f"{size.status_rounds} alternating rounds of {size.status_seconds:g} s per RPC; "
            f"values are medians of the rounds, ratios medians of each round's ratio. "
            "TurnStatus asks for a random existing turn; on SQLite the service keeps "
            "turns' statuses in a cache its writer keeps exact (decision 148), and the "
            "no-cache rows run the same load against the service started with "
            "`--status-cache-turns 0`, as PostgreSQL and a miss read. Open loop: "
            f"{size.open_loop_rate:g} calls/s for {size.open_loop_seconds:g} s, latency "
            "from send to answer."
        ),
    )
    with scratch_dir("status") as data_dir:
        populate.fill(data_dir, populate.TurnSpec(TURNS))
        with ServerProcess(data_dir) as server:
            m = asyncio.run(_measure(server.address, server.pid, size, with_open_loop=True))
        # What a miss costs, and every call on PostgreSQL: the read each time.
        with ServerProcess(data_dir, args=["--status-cache-turns", "0"]) as server:
            u = asyncio.run(_measure(server.address, server.pid, size, with_open_loop=False))
    m |= {f"uncached_{key}": value for key, value in u.items()}
    section.metrics = m
    callers = size.status_callers
    section.rows = [
        *call_rows(
            m,
            "status",
            "health",
            (f"throughput, {callers} callers", "service CPU per call"),
            target=0.9,
        ),
        *call_rows(
            m,
            "uncached_status",
            "uncached_health",
            (
                f"throughput, {callers} callers, no cache (a read per call)",
                "service CPU per call, no cache",
            ),
            ratios="uncached_",
        ),
        Row(
            f"p50 latency, {size.status_callers} callers",
            fmt_ms(m["status_p50"]),
            fmt_ms(m["health_p50"]),
            fmt_ratio(m["p50_ratio"]),
        ),
        Row(
            f"p99 latency, {size.status_callers} callers",
            fmt_ms(m["status_p99"]),
            fmt_ms(m["health_p99"]),
            fmt_ratio(m["p99_ratio"]),
        ),
        Row(
            f"p50 latency, open loop {size.open_loop_rate:g}/s",
            fmt_ms(m["status_open_p50"]),
            fmt_ms(m["health_open_p50"]),
            fmt_ratio(ratio(m["status_open_p50"], m["health_open_p50"])),
        ),
        Row(
            f"p99 latency, open loop {size.open_loop_rate:g}/s",
            fmt_ms(m["status_open_p99"]),
            fmt_ms(m["health_open_p99"]),
            fmt_ratio(ratio(m["status_open_p99"], m["health_open_p99"])),
            "≤ 2 ms",
            m["status_open_p99"] <= 0.002,
        ),
    ]
    late = max(m["status_open_late"], m["health_open_late"])
    section.notes.append(
        f"The open-loop sender was at most {fmt_ms(late)} late on a send "
        "(a late sender would understate the latency)."
    )
    return section
