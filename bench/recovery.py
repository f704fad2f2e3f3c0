"""Recovery: from a restarted agent process being healthy to the first event of the
step its re-driven turn resumes.

An agent process (bench/recovery_agent.py, the bridge hosting a 4-step graph) runs
turns that hang in step 3; the benchmark SIGKILLs it there and starts a new process
of the same replica. The clock starts when the new process's GET /healthz first
answers 200 (polled every 2 ms from here; the time that GET was sent) and stops, per
turn, when the first event of the re-driven attempt (the re-run step 3) arrives on
NATS, where a watcher sees it. In between: the bridge's startup Redrive, the rewind,
resuming the graph from its checkpoint through RemoteSaver, the event appended and
mirrored via the outbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg

from bench.common import (
    REPO_BENCH,
    Row,
    Section,
    ServerProcess,
    Size,
    fmt_ms,
    free_port,
    median,
    nats_server,
    scratch_dir,
)

AGENT = "benchagent"
REPLICA = "bench-replica"


class Watch:
    """Events of every turn from NATS, with the time each arrived here."""

    def __init__(self) -> None:
        self.first_resumed: dict[str, float] = {}
        self.hanging: set[str] = set()
        self.done: set[str] = set()
        self.changed = asyncio.Event()

    async def on_event(self, msg: Msg) -> None:
        now = time.perf_counter()
        event: dict[str, Any] = json.loads(msg.data)
        turn_id = event["turn_id"]
        if event["attempt"] >= 1:
            self.first_resumed.setdefault(turn_id, now)
        elif event["type"] == "token" and event["data"].get("node") == "step3":
            self.hanging.add(turn_id)
        if event["type"] in ("turn.done", "turn.failed"):
            self.done.add(turn_id)
        self.changed.set()

    async def until(self, predicate: Any, timeout: float) -> None:
        async def loop() -> None:
            while not predicate():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), timeout)


@asynccontextmanager
async def agent(
    service: str,
    nats_url: str,
    log: Path,
    *,
    agent: str = AGENT,
    replica: str = REPLICA,
    health: str = "127.0.0.1:0",
    env: dict[str, str] | None = None,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """bench/recovery_agent.py in a process of its own (this benchmark's, and
    bench/overload.py's with no hang), its stderr appended to `log`; `env` adds to its
    environment (BENCH_WAIT_FOR_GO, BENCH_HANG_STEP). SIGTERMed at the end, SIGKILLed
    if it has not stopped 20 s later."""
    environment = {
        **os.environ,
        "TURNKEEPER_ADDRESS": service,
        "NATS_URL": nats_url,
        "TURNKEEPER_AGENT": agent,
        "TURNKEEPER_REPLICA": replica,
        "TURNKEEPER_HEALTH_LISTEN": health,
        "TURNKEEPER_SHUTDOWN_GRACE": "1",
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    err = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bench.recovery_agent",
            cwd=REPO_BENCH.parent,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
            env=environment,
        )
    finally:
        os.close(err)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def expect_line(
    proc: asyncio.subprocess.Process, expected: bytes, timeout: float = 60
) -> None:
    """The agent's next line of output is `expected` (`imported`, `ready`)."""
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if line.strip() != expected:
        raise RuntimeError(f"the agent did not start: {line!r}")


async def _go(proc: asyncio.subprocess.Process) -> None:
    """Start the bridge of a warm agent."""
    await expect_line(proc, b"imported")
    assert proc.stdin is not None
    proc.stdin.write(b"go\n")
    await proc.stdin.drain()


async def _healthy(port: int, timeout: float = 60) -> float:
    """perf_counter() when the first GET /healthz that answers 200 was sent.

    The send time, not the answer's: the bridge starts its Redrive the moment it is
    healthy, and the answer can reach us later than the resumed step's first event
    (the agent's loop is busy resuming). Healthy came after the send, so the send
    time is a lower bound, off by at most one poll."""
    from turnkeeper.agent.bridge._health import get_status

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sent = time.perf_counter()
        with contextlib.suppress(OSError, TimeoutError, ValueError, IndexError):
            if await get_status("127.0.0.1", port, timeout=1.0) == 200:
                return sent
        await asyncio.sleep(0.002)
    raise RuntimeError(f"the agent's /healthz never answered 200 in {timeout:g} s")


async def create(
    nc: Client, agent: str, turn_id: str, input: dict[str, Any], timeout: float
) -> None:
    """A background turn of `agent`, created over NATS (`responses/create`)."""
    envelope = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "responses/create",
        "params": {
            "input": input,
            "turn_id": turn_id,
            "thread_id": f"thread-{turn_id}",
            "background": True,
        },
        "metadata": {},
    }
    subject = f"vystak.default.agents.{agent}.tasks"
    reply = json.loads((await nc.request(subject, json.dumps(envelope).encode(), timeout)).data)
    if "result" not in reply:
        raise RuntimeError(f"responses/create failed: {reply}")


async def _one(service: str, nats_url: str, count: int, log: Path) -> list[float]:
    """Seconds from healthy to the first resumed event, per turn, for `count` turns
    orphaned together."""
    watch = Watch()
    nc = await nats.connect(nats_url)
    try:
        await nc.subscribe("vystak.turn.events.>", cb=watch.on_event)
        await nc.flush()
        turn_ids = [f"rec-{uuid.uuid4().hex[:12]}" for _ in range(count)]
        port = free_port()
        # The replacement imports while the first agent runs; its bridge starts at go.
        async with (
            agent(service, nats_url, log, env={"BENCH_WAIT_FOR_GO": "0"}) as first,
            agent(
                service,
                nats_url,
                log,
                health=f"127.0.0.1:{port}",
                env={"BENCH_WAIT_FOR_GO": "1"},
            ) as second,
        ):
            await expect_line(first, b"ready")
            for turn_id in turn_ids:
                await create(nc, AGENT, turn_id, {"job": "recover", "results": []}, timeout=30)
            await watch.until(lambda: watch.hanging >= set(turn_ids), 60)
            first.kill()  # SIGKILL in the middle of step 3
            await first.wait()
            await _go(second)
            healthy = await _healthy(port)
            await watch.until(lambda: set(watch.first_resumed) >= set(turn_ids), 60)
            await watch.until(lambda: watch.done >= set(turn_ids), 60)
        return [watch.first_resumed[t] - healthy for t in turn_ids]
    finally:
        await nc.close()


async def _measure(
    service: str, nats_url: str, size: Size, log: Path
) -> tuple[list[float], list[float]]:
    singles = []
    for _ in range(size.recovery_reps):
        singles += await _one(service, nats_url, 1, log)
    batch = await _one(service, nats_url, size.recovery_batch, log) if size.recovery_batch else []
    return singles, batch


def run(size: Size) -> Section:
    section = Section(
        key="recovery",
        title="Recovery: agent healthy → first event of the resumed step",
        method=(
            "A real agent process (the bridge hosting a 4-step graph, RemoteSaver, "
            '`durability="sync"`) is SIGKILLed while its turn streams step 3; a new '
            "process of the same replica starts. Timed from its first GET /healthz "
            "answered 200 (polled every 2 ms; from when it was sent) to the first event "
            "of the re-run step arriving on NATS: startup Redrive, rewind, resume from "
            "the checkpoint, the "
            f"event appended and mirrored. {size.recovery_reps} single-turn runs (median), "
            f"and one run with {size.recovery_batch} turns orphaned at once (median and "
            "slowest turn). Service and nats-server in their own processes."
        ),
    )
    if importlib.util.find_spec("turnkeeper.agent.bridge") is None:
        section.skipped = "the bridge (`turnkeeper.agent.bridge`) is not installed"
        return section
    with (
        scratch_dir("recovery") as data_dir,
        nats_server() as url,
        ServerProcess(data_dir, nats_url=url) as server,
    ):
        log = data_dir / "agents.log"
        singles, batch = asyncio.run(_measure(server.address, url, size, log))
    single = median(singles)
    section.metrics = {"single_s": single}
    section.rows = [
        Row("one orphaned turn (median)", fmt_ms(single), target="≤ 200 ms", met=single <= 0.2)
    ]
    if batch:
        section.metrics |= {"batch_median_s": median(batch), "batch_max_s": max(batch)}
        section.rows += [
            Row(
                f"{size.recovery_batch} turns orphaned at once, median turn", fmt_ms(median(batch))
            ),
            Row(
                f"{size.recovery_batch} turns orphaned at once, slowest turn",
                fmt_ms(max(batch)),
                target="≤ 200 ms per turn",
                met=max(batch) <= 0.2,
            ),
        ]
    return section
