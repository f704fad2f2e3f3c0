"""`python -m bench.postgres --smoke` still runs end to end (tiny sizes) and prints
its table with a figure in every cell. Never timings: those are in
docs/benchmarks.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]


def test_the_postgres_bench_runs_and_prints_every_figure() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.postgres", "--smoke"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [
        line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line
    ]
    assert rows[0] == "| | SQLite | PostgreSQL |"
    figures = rows[1:]
    assert len(figures) == 11
    for row in figures:
        cells = [c.strip() for c in row.strip("|").split("|")]
        # Every PostgreSQL cell holds a positive number.
        numbers = [float(n) for n in re.findall(r"\d+(?:\.\d+)?", cells[2])]
        assert numbers and max(numbers) > 0, row
