"""The README's first command, `turnkeeper dev examples/quickstart/langgraph.json`, run
as written from a copy of the tree, then driven as a newcomer would: LangGraph's
Python client streams a run, the graphs' process is SIGKILLed mid-run, and the run
finishes anyway, each step once.

The command's install part (`python3.11 -m venv .venv && . .venv/bin/activate && pip
install -e './clients/python[agent]' -e ./server`) is not run here: the test run's
own venv has that install and more (`tests/packaging/test_readme_commands.py` runs
the README's installs in fresh venvs). What runs is the rest of the line, by bash, in
the copy, with that venv's `bin` first on PATH and no TURNKEEPER_* or NATS_* variable
set, as in a fresh terminal.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.schema import StreamPart

from tests.packaging.test_readme_commands import NOT_RUN_HERE, block, working_copy
from tests.support.agents import PATIENCE, Agent
from tests.support.procs import kill_group, spawn_child

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

INSTALL = (
    "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e "
    "'./clients/python[agent]' -e ./server"
)
DEV = "turnkeeper dev examples/quickstart/langgraph.json"
STEPS = ["think", "answer"]
HOSTED = re.compile(r"^turnkeeper dev: graphs hosted by pid (\d+)$")


def readme_command() -> str:
    """The quick start's first line, checked to be the install and then DEV."""
    line = f"{INSTALL} && {DEV}"
    assert ("README.md", line) in NOT_RUN_HERE
    found = block("README.md", line)
    assert found.first_line == line
    # The example's own README shows the same command.
    assert block("examples/quickstart/README.md", DEV).text.strip() == DEV
    return found.first_line.removeprefix(f"{INSTALL} && ")


def fresh_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "NATS_"))}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env.update(no_proxy="127.0.0.1,localhost", PYTHONUNBUFFERED="1")
    # A second per step: the window in which the graphs' process is killed.
    env["QUICKSTART_STEP_DELAY"] = "1"
    return env


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    return working_copy(tmp_path / "turnkeeper")


@pytest.fixture
async def dev(copy: Path) -> AsyncIterator[Agent]:
    child = await spawn_child(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        readme_command(),
        cwd=str(copy),
        env=fresh_env(),
        stdin=asyncio.subprocess.DEVNULL,
    )
    process = Agent(child, "turnkeeper dev")
    try:
        yield process
    finally:
        process.signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait_exited(), 10)
        finally:
            kill_group(child.proc.pid)
            for line in process.lines:
                if match := HOSTED.match(line):
                    kill_group(int(match.group(1)))
            await process.close()


def hosts(process: Agent) -> list[int]:
    return [int(m.group(1)) for line in process.lines if (m := HOSTED.match(line))]


async def test_the_quick_start_survives_a_sigkill_of_its_graphs_mid_run(
    dev: Agent, copy: Path
) -> None:
    await dev.wait_line(lambda line: line == "turnkeeper dev: ready (Ctrl-C stops it)", 240)
    # The project's data beside its langgraph.json, nowhere else.
    assert (copy / "examples" / "quickstart" / ".turnkeeper" / "turns.db").exists()
    assert not (copy / ".turnkeeper").exists()
    url = next(line.rsplit(" ", 1)[1] for line in dev.lines if "LangGraph API on http://" in line)
    port = url.rsplit(":", 1)[1]
    # What the README says it prints, on whichever port it took.
    shown = block("README.md", f"{INSTALL} && {DEV}").output
    assert shown is not None
    for line in shown.replace(":2024", f":{port}").splitlines():
        assert line in dev.lines, f"the README shows {line!r}; dev printed:\n{dev.output()}"

    # Nothing but what a newcomer should read: no gRPC core chatter about fork().
    assert not [x for x in dev.lines if "fork_posix" in x], dev.output()
    client = get_client(url=url)
    try:
        thread = await client.threads.create()
        parts: list[StreamPart] = []
        thought = asyncio.Event()

        question: Any = {"messages": [{"role": "user", "content": "is it durable?"}]}

        async def stream() -> None:
            async for part in client.runs.stream(
                thread["thread_id"],
                "chat",
                input=question,
                stream_mode=["updates", "values"],
            ):
                parts.append(part)
                if part.event == "updates" and "think" in part.data:
                    thought.set()

        streaming = asyncio.create_task(stream())
        await asyncio.wait_for(thought.wait(), PATIENCE * 2)
        # `answer` is running (each step takes a second): kill its process.
        (first,) = hosts(dev)
        os.kill(first, signal.SIGKILL)
        await asyncio.wait_for(streaming, PATIENCE * 4)
        second = hosts(dev)[1:]
        assert second and second[0] != first, "dev started the graphs again"
        assert any("killed by SIGKILL" in line for line in dev.lines)

        updates = [next(iter(p.data)) for p in parts if p.event == "updates"]
        assert updates == STEPS, updates
        final: dict[str, Any] = [p.data for p in parts if p.event == "values"][-1]
        assert [m["type"] for m in final["messages"]] == ["human", "ai"]
        assert final["messages"][1]["content"].startswith("You asked 'is it durable?'")
        assert final["topic"] == "durable"
        run_id = parts[0].data["run_id"]
        run = await client.runs.get(thread["thread_id"], run_id)
        assert run["status"] == "success"
    finally:
        await client.http.client.aclose()
