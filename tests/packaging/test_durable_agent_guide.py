"""docs/guides/durable-agent.md, run as written: its Python files written out, its
commands run, the agent SIGKILLed while `write` runs (the page's `kill -9`) and started
again, and the turn then DONE after one rewind, `research`'s step shown once after the
reset (decision 207).

As the README test, the page's fixed ports (4222, 50051, 8080) become free ones, in
the commands and the files, and the environment gives the service's address and data
directory; the install line is the README test's own (an editable install of the
client's `agent` extra and the server), so this test runs in the suite's venv.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest

from tests.packaging.test_readme_commands import (
    Background,
    bash,
    block,
    blocks,
    data_dir,
    free_port,
)

PAGE = "docs/guides/durable-agent.md"
ROOT = Path(__file__).resolve().parents[2]
PYTHON_FILE = re.compile(r"^```python\n# (\w+\.py):.*?\n(.*?)^```\n", re.MULTILINE | re.DOTALL)

INSTALL = "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e './clients/python[agent]' -e ./server"
START_ALL = "nats-server -p 4222 &"
START_TURN = "python start.py"
WATCH = "turnkeeper turns watch turn-1"
RESTART = "NATS_URL=nats://127.0.0.1:4222 python agent.py &"
SHOW = "turnkeeper turns show turn-1"


def python_files() -> dict[str, str]:
    text = (ROOT / PAGE).read_text()
    return {
        m.group(1): f"# {m.group(1)}:" + m.group(0).split(":", 1)[1]
        for m in PYTHON_FILE.finditer(text)
    }


def test_the_page_has_the_blocks_and_files_this_test_runs() -> None:
    assert [b.first_line for b in blocks(PAGE)] == [
        INSTALL,
        START_ALL,
        START_TURN,
        WATCH,
        RESTART,
        SHOW,
    ]
    assert sorted(python_files()) == ["agent.py", "graph.py", "start.py"]


def words(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_the_guide_starts_follows_crashes_and_resumes_a_turn(tmp_path: Path) -> None:
    ports = {fixed: str(free_port()) for fixed in ("4222", "50051", "8080")}

    def ported(text: str) -> str:
        for fixed, free in ports.items():
            text = text.replace(fixed, free)
        return text

    work = tmp_path / "my-agent"
    work.mkdir()
    for name, source in python_files().items():
        code = source.split("\n", 1)[1].rsplit("```", 1)[0]
        (work / name).write_text(ported(code))
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "NATS_"))},
        "PYTHONUNBUFFERED": "1",
        "TURNKEEPER_DATA_DIR": str(data_dir(tmp_path)),
        "TURNKEEPER_LISTEN": f"127.0.0.1:{ports['50051']}",
        "TURNKEEPER_ADDRESS": f"127.0.0.1:{ports['50051']}",
        "TURNKEEPER_HTTP_PORT": "-1",
        "TURNKEEPER_HEALTH_LISTEN": f"127.0.0.1:{ports['8080']}",
        "no_proxy": "127.0.0.1,localhost",
        "no_grpc_proxy": "127.0.0.1,localhost",
    }
    nats_line, serve_line, agent_line = ported(block(PAGE, START_ALL).text).splitlines()
    started: list[Background] = []

    def background(line: str) -> Background:
        started.append(Background.start(line.strip().removesuffix("&").strip(), work, env))
        return started[-1]

    try:
        background(nats_line).wait_for("Server is ready", 30)
        background(serve_line).wait_for(r"^turnkeeper listening on ", 60)
        agent = background(agent_line)
        agent.wait_for(r"serving vystak\.default\.agents\.writer\.tasks", 60)

        answer = bash(block(PAGE, START_TURN).text, work, env, 60)
        assert "'turn_id': 'turn-1'" in answer and "'status': 'in_progress'" in answer
        watch = background(block(PAGE, WATCH).text)
        # research has finished and written its step event: write runs now.
        watch.wait_for(r"\bstep\b.*research", 60)
        os.killpg(agent.process.pid, signal.SIGKILL)  # the page's `kill -9`
        agent.process.wait()
        background(ported(block(PAGE, RESTART).text))
        watch.wait_for(r"turn\.done", 60)
        assert watch.process.wait(30) == 0
        shown = "\n".join(watch.lines)
        assert "reset" in shown.lower()
        # research's step event once after the reset: it was not run again.
        after_reset = shown.lower().split("reset", 1)[1]
        assert len(re.findall(r"\bstep\b.*research", after_reset)) == 1

        record = words(bash(block(PAGE, SHOW).text, work, env, 60))
        expected = block(PAGE, SHOW).output
        assert expected is not None
        for line in words(expected):
            assert line in record, f"{line} not in\n{record}"
    finally:
        for process in reversed(started):
            process.stop()
