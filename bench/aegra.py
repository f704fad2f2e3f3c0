"""Aegra, the open-source peer of the LangGraph API section (bench/langgraph_api.py).

Aegra (`aegra-api` on PyPI) is a self-hosted LangGraph server on FastAPI and
PostgreSQL. It needs Python 3.12 or later and pins its own LangGraph, so it runs from a
virtualenv of its own made from bench/aegra.txt with a Python 3.12 interpreter
(decision 360): `TURNKEEPER_BENCH_AEGRA` names that virtualenv's `python`, else one is
made under `~/.cache/turnkeeper-bench/aegra` with the first Python 3.12 found (pyenv's,
or one on PATH). Where none can be had, :class:`Unavailable` says why and the section
runs without Aegra, saying so.

It runs as its docs' single-process mode does: one uvicorn process, no Redis
(`REDIS_BROKER_ENABLED` unset: runs are tasks on its event loop, events go through an
in-memory broker), against a PostgreSQL database the caller gives it, with the graphs
of a `langgraph.json` in its working directory.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bench.common import REPO_BENCH, free_port, stop_process

CACHE = Path.home() / ".cache" / "turnkeeper-bench" / "aegra"
REQUIREMENTS = REPO_BENCH / "aegra.txt"


class Unavailable(Exception):
    """Aegra cannot be installed or started here; the message says why."""


def _python312() -> Path | None:
    """A Python 3.12 interpreter that runs: pyenv's newest 3.12.x, else one on PATH
    (pyenv's shim on PATH answers "command not found" when 3.12 is not selected)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = sorted((root / "versions").glob("3.12.*/bin/python3.12"), reverse=True)
    if found := shutil.which("python3.12"):
        candidates.append(Path(found))
    for candidate in candidates:
        probe = [str(candidate), "-c", "import sys; assert sys.version_info[:2] == (3, 12)"]
        if subprocess.run(probe, capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def aegra_python(cache: Path = CACHE) -> Path:
    """The `python` of Aegra's virtualenv, made (and cached) on first use."""
    given = os.environ.get("TURNKEEPER_BENCH_AEGRA")
    if given:
        if not Path(given).exists():
            raise Unavailable(f"TURNKEEPER_BENCH_AEGRA={given!r} does not exist")
        return Path(given)
    python = cache / "bin" / "python"
    if python.exists():
        return python
    base = _python312()
    if base is None:
        raise Unavailable(
            "no Python 3.12 (aegra-api needs >= 3.12): none on PATH and none under pyenv's "
            "versions/; set TURNKEEPER_BENCH_AEGRA to a virtualenv's python with "
            "bench/aegra.txt installed"
        )
    made = subprocess.run(
        [str(base), "-m", "venv", str(cache)], capture_output=True, text=True, check=False
    )
    if made.returncode == 0:
        made = subprocess.run(
            [str(cache / "bin" / "pip"), "install", "-q", "-r", str(REQUIREMENTS)],
            capture_output=True,
            text=True,
            check=False,
        )
    if made.returncode != 0:
        shutil.rmtree(cache, ignore_errors=True)  # a half-made one is not reused
        raise Unavailable(f"installing bench/aegra.txt failed: {made.stderr.strip()[-600:]}")
    return python


def _wait_healthy(url: str, proc: subprocess.Popen[Any], log: Path, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise Unavailable(
                f"Aegra exited with {proc.returncode}: {log.read_text(errors='replace')[-600:]}"
            )
        with suppress(httpx.HTTPError):
            # 200 once its database, checkpointer and store are connected.
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    raise Unavailable(f"Aegra did not answer /health in {timeout:g} s")


@contextmanager
def aegra_server(app: Path, database_url: str, python: Path) -> Iterator[tuple[str, int]]:
    """Aegra serving `app`/langgraph.json on `database_url`; yields its URL and pid."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "LOG_LEVEL": "WARNING",
        "REDIS_BROKER_ENABLED": "false",
        "ENABLE_PROMETHEUS_METRICS": "false",
        "OTEL_TARGETS": "",
        "LANGSMITH_TRACING": "false",
    }
    log = app.parent / "aegra.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [
                *(str(python), "-m", "uvicorn", "aegra_api.main:app"),
                *("--host", "127.0.0.1", "--port", str(port)),
                *("--log-level", "warning", "--no-access-log"),
            ],
            cwd=app,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield url, proc.pid
    finally:
        stop_process(proc)


def tree_cpu(roots: list[int]) -> float:
    """CPU seconds (user + system) used by the processes `roots` and all their
    descendants, from /proc (Linux): a server's workers, PostgreSQL's backends. A
    descendant that has ended counts too, through its parent's reaped children's
    time (cutime, cstime): a backend whose connection closed between two readings
    would otherwise take its CPU out of the second one, and a difference of two
    readings could come out negative."""
    ticks = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        pid = int(stat.parent.name)
        parent[pid] = int(fields[1])
        # Its own time, and its children's that it has waited for.
        used[pid] = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
    wanted = set(roots)
    total = 0
    for pid in used:
        walk: int | None = pid
        while walk is not None and walk > 1:
            if walk in wanted:
                total += used[pid]
                break
            walk = parent.get(walk)
    return total / ticks
