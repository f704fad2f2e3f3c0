"""Under overload: the same turns on a quiet machine and with CPU hogs at twice the
cores, run time (p50, p99) side by side, and every failed or re-driven turn counted.

Real agent processes (bench/recovery_agent.py with no hang: the bridge hosting a
4-step graph whose nodes stream a reply and then work, an awaited sleep, for the
seconds the turn's input gives them) run turns created over NATS
(`responses/create`), a fixed number in flight, against one service on SQLite with
the fault campaign's 3 s lease. The same turns (ids aside: the same work in every
node) run twice: quiet, then with ``2 x cores`` processes spinning on the CPU at the
same priority as everything else (the overload campaign's hogs,
tests/faults/overload.py) from the first turn to the last. Run time is the journal's
own: from the turn's StartTurn to its end (GetTurn's created_at to updated_at), so
the harness's own slowness under the hogs does not count. A re-drive here is a live
agent's turn declared dead (nothing dies); a lease that lapsed and was kept because
the agent answered that it still runs the turn (decision 382) is counted apart.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from bench import recovery
from bench.common import (
    Row,
    Section,
    ServerProcess,
    Size,
    fmt_ratio,
    fmt_s,
    median,
    nats_server,
    percentile,
    ratio,
    scratch_dir,
)

AGENT = "overloadagent"
# The fault campaign's lease (tests/faults/campaign.py Plan.lease_seconds): short,
# so that a starved heartbeat shows.
LEASE_SECONDS = 3.0
HOGS_PER_CORE = 2
# A turn not over by then fails the section (a run that never ends is no figure).
TURN_DEADLINE = 300.0
# What the service logs when a lapsed lease is kept (engine/turns.py reap).
RENEWED = "answers that it still runs it"
TERMINAL = ("turn.done", "turn.failed", "turn.cancelled")
SPIN = "while True:\n    pass\n"


@contextmanager
def cpu_hogs(per_core: int) -> Iterator[int]:
    """`per_core` spinning processes per core until the block ends (as
    tests/faults/overload.py's CpuHogs, which the bench does not import)."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SPIN],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(per_core * (os.cpu_count() or 1))
    ]
    try:
        yield len(procs)
    finally:
        for proc in procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        for proc in procs:
            proc.wait()


@dataclass
class Phase:
    """One pass over the turns: run times, and what went wrong."""

    name: str
    seconds: list[float] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    redriven: dict[str, int] = field(default_factory=dict)
    renewed: int = 0
    causes: list[str] = field(default_factory=list)


class Ends:
    """The end of every turn, from its terminal event on NATS."""

    def __init__(self) -> None:
        self.waiting: dict[str, asyncio.Future[str]] = {}

    def expect(self, turn_id: str) -> asyncio.Future[str]:
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.waiting[turn_id] = future
        return future

    async def on_event(self, msg: Msg) -> None:
        event: dict[str, Any] = json.loads(msg.data)
        future = self.waiting.get(event.get("turn_id", ""))
        if event.get("type") in TERMINAL and future is not None and not future.done():
            future.set_result(event["type"])


@asynccontextmanager
async def _agent(
    service: str, nats_url: str, replica: str, log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """bench/recovery.py's agent, with no hang, once it is ready."""
    env = {"BENCH_HANG_STEP": "0"}
    async with recovery.agent(
        service, nats_url, log, agent=AGENT, replica=replica, env=env
    ) as proc:
        try:
            await recovery.expect_line(proc, b"ready", timeout=120)
        except RuntimeError as exc:
            raise RuntimeError(f"agent {replica}: {exc} (see {log})") from None
        yield proc


def workloads(size: Size) -> list[list[float]]:
    """Each turn's work, seconds per node: the same in both passes (a fixed seed)."""
    rng = random.Random(51)
    step = size.overload_step_seconds
    return [[rng.uniform(0, step) for _ in range(4)] for _ in range(size.overload_turns)]


async def _pass(
    nc: Client, ends: Ends, service: str, name: str, work: list[list[float]], callers: int
) -> tuple[Phase, list[str]]:
    """Every turn of `work`, `callers` at once, each until its terminal event."""
    from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
    from turnkeeper.v1 import turns_pb2

    run = uuid.uuid4().hex[:6]
    turn_ids = [f"ov-{name}-{run}-{i}" for i in range(len(work))]
    queue = list(zip(turn_ids, work, strict=True))

    async def caller() -> None:
        while queue:
            turn_id, seconds = queue.pop(0)
            ended = ends.expect(turn_id)
            # Generous: under the hogs the answer itself can take seconds.
            job = {"job": "overload", "results": [], "work": seconds}
            await recovery.create(nc, AGENT, turn_id, job, timeout=60)
            await asyncio.wait_for(ended, TURN_DEADLINE)

    await asyncio.gather(*(caller() for _ in range(callers)))
    phase = Phase(name)
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service)) as client:
        for turn_id in turn_ids:
            turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=turn_id))).turn
            took = turn.updated_at.ToNanoseconds() - turn.created_at.ToNanoseconds()
            phase.seconds.append(took / 1e9)
            if turn.state != turns_pb2.TURN_STATE_DONE:
                phase.failed.append(turn_id)
            if turn.attempts:
                phase.redriven[turn_id] = turn.attempts
    return phase, turn_ids


def _log_since(log: Path, offset: int) -> tuple[list[str], int]:
    with log.open("rb") as f:
        f.seek(offset)
        data = f.read()
    return data.decode(errors="replace").splitlines(), offset + len(data)


async def _measure(service: str, nats_url: str, size: Size, data_dir: Path) -> list[Phase]:
    work = workloads(size)
    server_log = data_dir / "server.log"
    ends = Ends()
    nc = await nats.connect(nats_url)
    try:
        await nc.subscribe("vystak.turn.events.>", cb=ends.on_event)
        await nc.flush()
        async with AsyncExitStack() as stack:
            for i in range(size.overload_replicas):
                log = data_dir / f"agent-{i}.log"
                await stack.enter_async_context(_agent(service, nats_url, f"replica-{i}", log))
            phases = []
            offset = server_log.stat().st_size
            for name, hogs in (("quiet", 0), ("oversubscribed", HOGS_PER_CORE)):
                with cpu_hogs(hogs):
                    phase, _ = await _pass(nc, ends, service, name, work, size.overload_callers)
                lines, offset = _log_since(server_log, offset)
                phase.renewed = sum(RENEWED in line for line in lines)
                for turn_id in [*phase.redriven, *phase.failed]:
                    said = [line.strip() for line in lines if turn_id in line]
                    phase.causes.append(f"{turn_id}: " + (" / ".join(said[-3:]) or "no log line"))
                phases.append(phase)
            return phases
    finally:
        await nc.close()


def run(size: Size) -> Section:
    cores = os.cpu_count() or 1
    section = Section(
        key="overload",
        title="Under overload: run time at 2\u00d7 oversubscription",
        method=(
            f"{size.overload_turns} turns, {size.overload_callers} in flight, on "
            f"{size.overload_replicas} real agent process(es) (the bridge hosting a 4-step "
            "graph; each node streams a reply, then works up to "
            f"{size.overload_step_seconds:g} s, the same per turn in both passes) against "
            f"one service on SQLite with a {LEASE_SECONDS:g} s lease: first on the machine "
            f"as it is, then with {HOGS_PER_CORE * cores} CPU hogs ({HOGS_PER_CORE} per "
            "core) spinning for the whole pass. Run time from the journal (StartTurn to "
            "the turn's end). Failed and re-driven turns counted: nothing dies, so each "
            "would be a healthy turn lost to load."
        ),
    )
    if importlib.util.find_spec("turnkeeper.agent.bridge") is None:
        section.skipped = "the bridge (`turnkeeper.agent.bridge`) is not installed"
        return section
    with (
        scratch_dir("overload") as data_dir,
        nats_server() as url,
        ServerProcess(
            data_dir, nats_url=url, args=["--lease-seconds", f"{LEASE_SECONDS:g}"]
        ) as server,
    ):
        started = time.perf_counter()
        quiet, loaded = asyncio.run(_measure(server.address, url, size, data_dir))
        elapsed = time.perf_counter() - started
    p50 = (median(quiet.seconds), median(loaded.seconds))
    p99 = (percentile(quiet.seconds, 99), percentile(loaded.seconds, 99))
    section.metrics = {
        "quiet_p50_s": p50[0],
        "quiet_p99_s": p99[0],
        "oversubscribed_p50_s": p50[1],
        "oversubscribed_p99_s": p99[1],
        "p50_ratio": ratio(p50[1], p50[0]),
        "p99_ratio": ratio(p99[1], p99[0]),
        "failed_quiet": len(quiet.failed),
        "failed_oversubscribed": len(loaded.failed),
        "redriven_quiet": len(quiet.redriven),
        "redriven_oversubscribed": len(loaded.redriven),
        "renewed_quiet": quiet.renewed,
        "renewed_oversubscribed": loaded.renewed,
        "seconds": elapsed,
    }
    section.rows = [
        Row(
            "turn run time, p99, 2\u00d7 oversubscribed",
            fmt_s(p99[1]),
            f"quiet: {fmt_s(p99[0])}",
            fmt_ratio(ratio(p99[1], p99[0])),
        ),
        Row(
            "turn run time, median, 2\u00d7 oversubscribed",
            fmt_s(p50[1]),
            f"quiet: {fmt_s(p50[0])}",
            fmt_ratio(ratio(p50[1], p50[0])),
        ),
        Row(
            "turns FAILED, oversubscribed",
            str(len(loaded.failed)),
            f"quiet: {len(quiet.failed)}",
            target="0",
            met=not loaded.failed and not quiet.failed,
        ),
        Row(
            "turns re-driven (a live agent's turn declared dead), oversubscribed",
            str(len(loaded.redriven)),
            f"quiet: {len(quiet.redriven)}",
            target="0",
            met=not loaded.redriven and not quiet.redriven,
        ),
        Row(
            "lapsed leases kept: the agent answered it still runs the turn",
            str(loaded.renewed),
            f"quiet: {quiet.renewed}",
        ),
    ]
    for phase in (quiet, loaded):
        for cause in phase.causes:
            section.notes.append(f"{phase.name}: {cause}")
    return section
