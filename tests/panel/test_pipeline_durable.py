"""The pipeline example through turnkeeper: its walkthrough starts NATS, the service
and the pipeline agent (hosted by the bridge, checkpoints through RemoteSaver) as
real processes, SIGKILLs the agent while Plan is streaming, restarts it, and the
panel's sidebar goes on at Plan: Analyze is replayed from the journal, not re-run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from examples.pipeline.sidebar import sidebar_text

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_walkthrough_resumes_at_plan_after_a_sigkill() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.pipeline.walkthrough"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    sidebar = [
        line.strip().removeprefix("sidebar: ") for line in out.splitlines() if "sidebar:" in line
    ]
    kill = out.index("SIGKILL agent")
    # The contract's labels. Before the crash: Analyze finished, Plan streaming.
    assert sidebar_text("analyze") == "● Analyze  ○ Plan  ○ Generate"
    assert out.index(f"sidebar: {sidebar_text('analyze')}") < kill
    # After it: the reset, the replay of Analyze's retained step, then Plan and Generate.
    after = sidebar[sidebar.index(sidebar_text("analyze")) + 1 :]
    assert after == [sidebar_text("analyze"), sidebar_text("plan"), sidebar_text("generate")]
    assert kill < out.index("<<< RESET") < out.index(f"sidebar: {sidebar_text('plan')}")
    assert "model calls: Analyze 1x, Plan 2x, Generate 1x" in out
    assert "the re-drive resumed at Plan: Analyze was not re-run" in out
    assert "every promise held" in out
