"""The Aegra peer of the LangGraph bench section (bench/aegra.py, decision 360): where
its virtualenv cannot be had the section is told why, and a server's CPU is its whole
process tree's. Aegra itself is not run here (its virtualenv is the bench's, not CI's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bench import aegra


def test_a_named_virtualenv_that_is_missing_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TURNKEEPER_BENCH_AEGRA", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(aegra.Unavailable, match=r"TURNKEEPER_BENCH_AEGRA=.*does not exist"):
        aegra.aegra_python()


def test_without_python_3_12_nothing_is_made_and_the_reason_is_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TURNKEEPER_BENCH_AEGRA", raising=False)
    monkeypatch.setattr(aegra, "_python312", lambda: None)
    with pytest.raises(aegra.Unavailable, match=r"no Python 3\.12"):
        aegra.aegra_python(cache=tmp_path / "aegra")
    assert not (tmp_path / "aegra").exists()


# A child that burns 0.4 s of CPU. /proc counts CPU in clock ticks, each of user and
# system time truncated: 0.3 s leaves room for that (CI once read 0.29 of a child that
# burned exactly 0.3), and the parent alone uses a tenth of it.
BURN = "import time\nwhile time.process_time() < 0.4: pass"
LIVE = BURN + "\nprint('done', flush=True)\ninput()"


@pytest.mark.parametrize(
    "parent",
    [
        # Alive and waiting for stdin, its parent waiting for it.
        "import subprocess, sys\n"
        f"c = subprocess.Popen([sys.executable, '-c', {LIVE!r}], stdin=subprocess.PIPE)\n"
        "c.wait()",
        # Ended and reaped, as PostgreSQL's backend of a closed connection: its CPU is
        # the parent's reaped children's time now.
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {BURN!r}], check=True)\n"
        "print('done', flush=True)\n"
        "input()",
    ],
    ids=["alive", "ended"],
)
def test_a_servers_cpu_counts_its_children(parent: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", parent], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "done"
        assert aegra.tree_cpu([proc.pid]) >= 0.3
    finally:
        proc.kill()
        proc.wait()
