"""`python -m bench.postgres --smoke` still runs end to end (tiny sizes) and prints
its table with a figure in every cell, its databases in the session's PostgreSQL.
Never timings: those are in docs/benchmarks.md."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench.postgres import CLUSTER_ENV
from tests.support.postgres import PostgresCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]


def test_the_postgres_bench_runs_and_prints_every_figure(postgres_cluster: PostgresCluster) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.postgres", "--smoke"],
        cwd=REPO,
        env={**os.environ, CLUSTER_ENV: postgres_cluster.url()},
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
