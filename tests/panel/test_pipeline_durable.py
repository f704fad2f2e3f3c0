"""The pipeline example through turnkeeper: its walkthrough starts NATS, the service
and the pipeline agent (hosted by the bridge, checkpoints through RemoteSaver) as
real processes, SIGKILLs the agent while Plan is streaming, restarts it, and the
panel's sidebar goes on at Plan: Analyze is replayed from the journal, not re-run.
Then it SIGKILLs the agent in Generate once its model reply is journaled (an
effect, docs/effects.md): Generate runs again and the model is not called again.
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
    # After it: the reset, the replay of Analyze's retained step, then Plan; after the
    # second crash (in Generate) the replay of Analyze and Plan, then Generate.
    after = sidebar[sidebar.index(sidebar_text("analyze")) + 1 :]
    assert after == [
        sidebar_text("analyze"),
        sidebar_text("plan"),
        sidebar_text("analyze"),
        sidebar_text("plan"),
        sidebar_text("generate"),
    ]
    assert kill < out.index("<<< RESET") < out.index(f"sidebar: {sidebar_text('plan')}")
    second = out.index("SIGKILL agent", kill + 1)
    assert "its model reply complete and journaled" in out[second:]
    assert out.count("<<< RESET") == 2
    # Generate's model was called once: its re-run got the journaled reply.
    assert "model calls: Analyze 1x, Plan 2x, Generate 1x" in out
    assert "its model was not called again: the reply came from the effect ledger" in out
    assert "agent: Answer: What is a durable turn" in out
    assert "the first re-drive resumed at Plan: Analyze was not re-run" in out
    assert "every promise held" in out
