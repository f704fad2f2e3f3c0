"""examples/durable-four-step: the one-command walkthrough runs and keeps its
promises; its compose.yaml wires what the walkthrough needs (checked as text: no
Docker engine here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "durable-four-step"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_the_walkthrough_crashes_the_agent_and_the_turn_still_finishes_exactly() -> None:
    run = subprocess.run(
        [sys.executable, str(EXAMPLE / "walkthrough.py")],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    out = run.stdout
    assert run.returncode == 0, f"{out}\n{run.stderr}"
    assert "!!! SIGKILL agent" in out and "in step 4, after its tool published the post" in out
    for attempt in (1, 2):
        rewound = rf"<<< RESET: the turn was rewound to seq \d+ \(attempt {attempt}\)"
        assert len(re.findall(rewound, out)) == 1
    assert "replay [outline]" in out
    assert "the turn is DONE" in out
    assert "contiguous, exactly the retained ones" in out
    # publish ran twice (the second crash was in it), its tool published once: the
    # effect ledger answered the re-run with the recorded outcome.
    assert "outline 1x, research 2x, draft 1x, publish 2x" in out
    assert re.search(r"ledger: 1 post\(s\): fx-[0-9a-f]{40}\n", out)
    assert "effects: publish DONE; publish ran again after the crash and its tool did not" in out
    assert out.rstrip().endswith("every promise held")


def service_blocks(text: str) -> dict[str, str]:
    """Each top-level service's block of text, by name."""
    body = text[text.index("\nservices:\n") : text.index("\nvolumes:")]
    parts = re.split(r"^  ([a-z-]+):\n", body, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_compose_runs_the_same_walkthrough_with_containers() -> None:
    text = (EXAMPLE / "compose.yaml").read_text()
    assert "\t" not in text
    blocks = service_blocks(text)
    assert set(blocks) == {"nats", "turnkeeper", "agent", "panel"}

    # The service's data on a named volume at /data, built from the repository.
    service = blocks["turnkeeper"]
    assert "- turnkeeper-data:/data" in service
    assert re.search(r"^  turnkeeper-data:", text[text.index("\nvolumes:") :], re.MULTILINE)
    context = re.search(r"context: (\S+)", service)
    assert context is not None
    assert (EXAMPLE / context.group(1) / "Dockerfile").is_file()
    assert "TURNKEEPER_NATS_URL: nats://nats:4222" in service

    # Every container runs a file that exists, from the same image.
    for name in ("agent", "panel"):
        block = blocks[name]
        assert "image: turnkeeper:local" in block
        entry = re.search(r'entrypoint: \["python", "([^"]+)"', block)
        assert entry is not None
        assert (EXAMPLE.parent.parent / entry.group(1)).is_file()
        assert "TURNKEEPER_ADDRESS: turnkeeper:50051" in block

    # The agent crashes by itself and comes back under the same replica name.
    agent = blocks["agent"]
    assert 'CRASH_AT_STEP: "2"' in agent
    assert "restart: on-failure" in agent
    assert re.search(r"hostname: \S+", agent)
    assert "/healthz" in agent
    assert '"--attach"' in blocks["panel"]
