"""TurnStatus with OpenTelemetry tracing off (the default) and on.

Two service processes over copies of the same journal, one started with
`OTEL_TRACES_EXPORTER=console` (a SERVER span per RPC, exported by the SDK's batch
processor as JSON to the service's stdout, which the benchmark drains: the
formatting is an upper bound on what an OTLP exporter costs on the service's CPU),
one without. The load generator sends no trace context, so each span is a root.
"""

from __future__ import annotations

import asyncio
import shutil

from grpc import aio

from bench import populate
from bench.common import (
    Section,
    ServerProcess,
    Size,
    call_rows,
    cpu_delta,
    cpu_seconds,
    median,
    paired_ratio,
    scratch_dir,
)
from bench.status import TURNS, _calls, closed_loop

TRACED = {"OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "turnkeeper-bench"}


async def _measure(servers: dict[str, ServerProcess], size: Size) -> dict[str, float]:
    per: dict[str, dict[str, list[float]]] = {k: {"rps": [], "cpu_us": []} for k in servers}
    async with (
        aio.insecure_channel(servers["off"].address) as off,
        aio.insecure_channel(servers["on"].address) as on,
    ):
        calls = {"off": _calls(off)["status"], "on": _calls(on)["status"]}
        for call in calls.values():
            await closed_loop(call, size.status_callers, min(1.0, size.status_seconds))
        for round_ in range(size.status_rounds):
            # Alternate which goes first, so a drift of the machine hits both alike.
            order = ["off", "on"] if round_ % 2 == 0 else ["on", "off"]
            for name in order:
                pid = servers[name].pid
                cpu = cpu_seconds(pid)
                rps, lat = await closed_loop(calls[name], size.status_callers, size.status_seconds)
                used = sum(cpu_delta(cpu, cpu_seconds(pid)).values())
                per[name]["rps"].append(rps)
                per[name]["cpu_us"].append(used / len(lat) * 1e6)
    out = {f"{n}_{k}": median(v) for n, figures in per.items() for k, v in figures.items()}
    for key in ("rps", "cpu_us"):
        out[f"{key}_ratio"] = paired_ratio(per["on"][key], per["off"][key])
    return out


def run(size: Size) -> Section:
    section = Section(
        key="tracing",
        title="TurnStatus with tracing off and on",
        method=(
            f"Two service processes (`python -m turnkeeper_server`, no NATS) over copies of "
            f"one journal of {TURNS:,} turns; one with `OTEL_TRACES_EXPORTER=console` (a "
            "span per RPC, batch-exported as JSON to a drained pipe), one without (the "
            f"default: no interceptor). Closed loop, {size.status_callers} callers, "
            f"{size.status_rounds} alternating rounds of {size.status_seconds:g} s; "
            "medians of the rounds, ratios medians of each round's ratio."
        ),
    )
    with scratch_dir("tracing") as data_dir:
        off_dir, on_dir = data_dir / "off", data_dir / "on"
        off_dir.mkdir()
        populate.fill(off_dir, populate.TurnSpec(TURNS))
        shutil.copytree(off_dir, on_dir)
        with ServerProcess(off_dir) as off, ServerProcess(on_dir, env=TRACED) as on:
            m = asyncio.run(_measure({"off": off, "on": on}, size))
    section.metrics = m
    section.rows = call_rows(
        m,
        "on",
        "off",
        (
            f"TurnStatus throughput, {size.status_callers} callers, tracing on",
            "service CPU per call, tracing on",
        ),
    )
    return section
