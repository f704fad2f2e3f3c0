"""The retention soak still runs, tiny: a few hundred turns against a real service,
and the sweeper really took what the turns carried (never timings or sizes, which
belong in docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TURNS = 300
REPO = Path(__file__).resolve().parents[2]


def test_soak_sweeps_the_events_and_keeps_the_turn_rows(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    samples = asyncio.run(
        soak.soak(data, TURNS, every=100, callers=4, retention=0.5, interval=0.1, drain=True)
    )
    assert [s.turns for s in samples] == [100, 200, 300, 300]
    floor = samples[-1]
    # Every turn appended its events; after the sweep almost none are left.
    assert floor.events < TURNS * soak.EVENTS_PER_TURN / 10
    assert floor.outbox < TURNS * soak.EVENTS_PER_TURN / 10
    # The turn rows stay, marked pruned.
    assert floor.turn_rows == TURNS
    with sqlite3.connect(data / "turns.db") as db:
        pruned = db.execute("SELECT count(*) FROM turns WHERE pruned = 1").fetchone()[0]
    db.close()
    assert pruned == TURNS

    report = tmp_path / "benchmarks.md"
    report.write_text(
        "# Benchmarks\n\n## Before\n\ntext\n\n## Retention soak\n\nthe previous figures\n"
    )
    args = argparse.Namespace(
        turns=TURNS, every=100, report_every=100, callers=4, retention=0.5, interval=0.1, drain=True
    )
    soak.write_section(report, soak.render(samples, args))
    text = report.read_text()
    assert text.count("## Retention soak") == 1
    assert "the previous figures" not in text and "## Before" in text
    assert "| 300, drained |" in text


def test_soak_with_a_turn_horizon_deletes_the_turns_and_their_threads(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    settings: dict[str, Any] = {
        "every": 100,
        "callers": 4,
        "retention": 0.2,
        "interval": 0.1,
        "drain": True,
        "turn_retention": 0.4,
        "checkpoints": True,
    }
    samples = asyncio.run(soak.soak(data, TURNS, **settings))
    floor = samples[-1]
    # Drained: the sweeper took every turn, row and all, and every thread's checkpoint.
    assert (floor.events, floor.outbox, floor.turn_rows) == (0, 0, 0)
    with sqlite3.connect(data / "sessions.db") as db:
        left = [
            db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("checkpoints", "writes", "turnkeeper_boundaries")
        ]
    db.close()
    assert left == [0, 0, 0]

    args = argparse.Namespace(turns=TURNS, report_every=100, **settings)
    section = soak.render(samples, args)
    assert "--turn-retention 0.4 --checkpoints" in section
    assert "Past the turn horizon (0.4 s)" in section


def test_soak_command_writes_its_section(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.soak",
            *("--turns", str(TURNS), "--every", "100", "--report-every", "100"),
            *("--retention", "0.5", "--interval", "0.1", "--callers", "4", "--out", str(out)),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith("| 300, drained |")]
    assert len(rows) == 1
    # The drained row's last three cells: events, outbox rows and turn rows still held.
    cells = [c.strip() for c in rows[0].strip("|").split("|")]
    events, outbox, turn_rows = (int(c.replace(",", "")) for c in cells[-3:])
    assert turn_rows == TURNS  # no turn horizon: retention keeps the rows
    assert events < TURNS * soak.EVENTS_PER_TURN / 10
    assert outbox < TURNS * soak.EVENTS_PER_TURN / 10
