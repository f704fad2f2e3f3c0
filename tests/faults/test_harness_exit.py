"""The harness sees an agent exit when it exits, whatever became of its pipes. On
Python 3.11 a `Process.wait()` begun before the exit returns only once every pipe
to the child has closed: a process that outlives the agent holding its stdout, or
a reader that stopped (a line over the stream's limit), kept `wait_exit()` waiting
for ever though the agent had long been reaped (the containment test's 480 s)."""

from __future__ import annotations

import asyncio
import sys

from tests.support.agents import Agent
from tests.support.procs import spawn_child


async def test_an_agent_whose_pipes_outlive_it_is_seen_to_exit() -> None:
    # The shell exits with 3 once `sleep` (its child, in its group) holds its pipes.
    child = await spawn_child("/bin/sh", "-c", "sleep 1000 & echo started; exit 3")
    agent = Agent(child, "outlived")
    waiting = asyncio.ensure_future(agent.wait_exit())  # begun before the exit
    await agent.wait_line(lambda line: line == "started")
    assert await waiting == 3
    assert agent.lines == ["started"]


async def test_a_line_longer_than_the_stream_limit_does_not_stop_the_reader() -> None:
    code = "print('x' * 300_000); print('after')"
    agent = Agent(await spawn_child(sys.executable, "-c", code), "long-line")
    waiting = asyncio.ensure_future(agent.wait_exit())
    assert await agent.wait_line(lambda line: line == "after") == "after"
    assert await waiting == 0
    assert agent.lines == ["x" * 300_000, "after"]
