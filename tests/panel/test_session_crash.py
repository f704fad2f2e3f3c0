"""The session's crash test: the agent process is SIGKILLed mid-turn and restarted; the
session's follower ends with the transcript of the same turn run without a crash,
and its consumer got exactly one reset and never showed a duplicate.

Real service, real nats-server, the real bridge in agent subprocesses (the bridge
engineer's tests/agents/job_agent.py, four steps; step 2 streams its reply and then
waits, on the first attempt only: the window for the kill).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.follower import Event, FollowOptions, Frame, Reset, TurnState
from turnkeeper.panel.session import AgentSession

from tests.support.agents import AGENT, Agents

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

JOB = {"job": "report", "results": []}


class Screen:
    """What the consumer shows, checked after every frame: contiguous seqs from 1,
    and never a tool call or a step shown twice."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.shown: list[Event] = []
        self._changed = asyncio.Event()

    def __call__(self, frame: Frame) -> None:
        self.frames.append(frame)
        if isinstance(frame, Reset):
            self.shown.clear()
        elif isinstance(frame, Event):
            self.shown.append(frame)
            assert [e.seq for e in self.shown] == list(range(1, len(self.shown) + 1))
            once = Counter(
                (e.type, e.data.get("tool_call_id") or e.data.get("node"))
                for e in self.shown
                if e.type in ("tool_call_start", "tool_call_end", "step")
            )
            assert all(n == 1 for n in once.values()), once
        self._changed.set()

    async def wait_for(self, predicate: Any) -> None:
        async def loop() -> None:
            while not predicate(self.shown):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), 60)


def session_for(
    nc: Client, client: AsyncTurnkeeperClient, thread_id: str, screen: Screen
) -> AgentSession:
    transport = NatsAgentTransport(
        nc, AGENT, client=client, follow_options=FollowOptions(idle_gap=0.5, deadline=60)
    )
    return AgentSession(transport, thread_id=thread_id, on_frame=screen)


async def submit(session: AgentSession, payload: Any) -> None:
    """Submit; if the request reached no agent (a bridge announces itself ready a
    moment before NATS routes to it), apply the retry rule."""
    dispatched = await session.submit(payload)
    for _ in range(20):
        if dispatched:
            return
        assert session.error is not None and session.error.retryable, session.error
        dispatched = await session.retry()
    raise AssertionError(f"never dispatched: {session.error}")


async def test_sigkill_and_restart_mid_turn_gives_one_reset_and_the_uninterrupted_transcript(
    agents: Agents, nc: Client, client: AsyncTurnkeeperClient
) -> None:
    first = await agents.start(slow_step=2)
    # The replacement imports while the first runs; its incarnation starts at go().
    second = await agents.spawn(warm=True)

    screen = Screen()
    session = session_for(nc, client, "th-crash", screen)
    await submit(session, JOB)
    # Step 1 is done and step 2 has streamed its reply: it now waits, unfinished.
    await screen.wait_for(
        lambda shown: any(e.type == "token" and e.data["node"] == "step2" for e in shown)
    )
    await first.kill()
    await second.go()
    await session.join()

    assert (session.state, session.error) == (TurnState.DONE, None)
    assert session.transcript.resets == 1
    [reset] = [f for f in screen.frames if isinstance(f, Reset)]
    assert not reset.local and reset.attempt == 1
    assert reset.seq == next(
        e.seq for e in screen.shown if e.type == "step" and e.data["node"] == "step1"
    )
    assert [e.type for e in screen.shown][-2:] == ["final", "turn.done"]
    assert [e.seq for e in screen.shown] == [e.seq for e in session.transcript.events]

    # The same job on another thread, nobody killed: the same transcript.
    reference_screen = Screen()
    reference = session_for(nc, client, "th-ref", reference_screen)
    await submit(reference, JOB)
    await reference.join()
    assert reference.transcript.resets == 0
    assert session.transcript.content() == reference.transcript.content()
    # And what the consumer ended up showing is exactly that.
    assert [(e.seq, e.type, e.data) for e in screen.shown] == reference.transcript.content()
    assert {e.attempt for e in session.transcript.events} == {0, 1}
