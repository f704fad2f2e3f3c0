"""The harness sees an agent exit when it exits. Two ways it did not:

- `Agent.wait_line` (so `ready()`) was woken only by output, and checked the exit
  status when woken. An agent's pipes usually end before asyncio delivers its exit,
  so an agent that died before its announcement left the wait asleep for ever (the
  [postgres] containment test's 480 s: the restarted agent took the poison turn in
  its startup Redrive and died before printing ``ready``).
- On Python 3.11 a `Process.wait()` begun before the exit returns only once every
  pipe to the child has closed: a process that outlives the agent holding its
  stdout, or a reader that stopped (a line over the stream's limit), kept
  `wait_exit()` waiting though the agent had long been reaped.
"""

from __future__ import annotations

import asyncio
import sys

import pytest

from tests.support.agents import Agent
from tests.support.procs import spawn_child


async def test_an_agent_that_exits_before_its_announcement_fails_the_wait_at_once() -> None:
    # Its pipes usually end before asyncio delivers the exit (a waitpid thread, then
    # two loop iterations); a wait woken only by output missed the exit and waited
    # for ever: 9 of 20 such waits hung with the old wait_line, on an idle machine.
    for i in range(20):
        agent = Agent(await spawn_child("/bin/sh", "-c", "exit 3"), f"early-{i}")
        with pytest.raises(AssertionError, match="exited"):
            await agent.ready()
        assert await agent.wait_exit() == 3


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
