"""examples/threadplane/walkthrough.py as its README runs it: a run streamed with
LangGraph's SDK survives a SIGKILL of its agent during Plan, every step shown once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]


def test_the_walkthrough_keeps_its_promise() -> None:
    done = subprocess.run(
        [sys.executable, "examples/threadplane/walkthrough.py"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    out = done.stdout
    assert "** agent SIGKILLed while Plan runs" in out
    steps = [line.split(": ", 1)[1] for line in out.splitlines() if "step done:" in line]
    assert steps == ["analyze", "plan", "generate"]
    assert "every step shown exactly once" in out
