"""The harness signals its agents without reaping them. An agent that dies while it
is being signalled (a poison turn's node SIGKILLs its own process; the zombie fault
may SIGSTOP that replica the same moment) must still be seen to die of SIGKILL, not
with the 255 asyncio reports for a child that something else reaped first."""

from __future__ import annotations

import asyncio
import signal

from tests.support.agents import Agent
from tests.support.procs import spawn_child

# Each child dies at once; with a signal path that polls the child, about a third
# of them lose their status to that poll, so this many make the loss certain.
CHILDREN = 40


async def test_an_agent_signalled_as_it_dies_keeps_its_exit_status() -> None:
    for i in range(CHILDREN):
        child = await spawn_child("/bin/sh", "-c", "kill -KILL $$")
        proc = child.proc
        agent = Agent(child, f"dying-{i}")
        while proc.returncode is None:
            # SIGCONT: harmless to a live process, so only the race is under test.
            agent.signal(signal.SIGCONT)
            await asyncio.sleep(0)
        assert await agent.wait_exit() == -signal.SIGKILL, f"child {i} of {CHILDREN}"
