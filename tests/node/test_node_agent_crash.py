"""A LangGraph.js agent under the TypeScript TurnRunner survives a SIGKILL mid-turn.

The agent is clients/node/testing/agent.mjs, a real Node.js process, against a real
service and a real nats-server. Its `work` node, in the turn's first attempt, emits
an event and then hangs until the process is killed; the same replica started again
re-drives the turn from the checkpoint after `plan` with a new incarnation.
"""

from __future__ import annotations

from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.panel.follower import Event, Reset
from turnkeeper.v1 import turns_pb2

from tests.support.agents import result, until
from tests.support.nats import Collector, NatsServer
from tests.support.node import NodeAgents, Watcher, hold_turn

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGENT = "js-steps"


def seen_by_a_reader(events: list[Event]) -> list[tuple[int, str, Any]]:
    return [(e.seq, e.type, e.data) for e in events]


async def test_a_js_agent_sigkilled_mid_turn_and_restarted_finishes_with_the_uninterrupted_transcript(
    js_agents: NodeAgents, bus: tuple[Client, Collector], client: AsyncTurnkeeperClient
) -> None:
    nc, seen = bus
    first = await js_agents.start("js-replica-1", hold_work=True)
    watchers: list[Watcher] = []
    try:
        # The transcript of an uninterrupted run of the same graph and input.
        created = await result(
            nc,
            "responses/create",
            {"input": "report", "turn_id": "js-ref", "thread_id": "th-js-ref", "background": True},
            agent=AGENT,
        )
        assert created == {"turn_id": "js-ref", "thread_id": "th-js-ref", "status": "in_progress"}
        reference = Watcher(client, "js-ref")
        watchers.append(reference)
        uninterrupted = await reference.finished()
        assert uninterrupted.resets == 0
        assert [e.type for e in uninterrupted.events] == [
            "token",
            "step",
            "token",
            "step",
            "token",
            "step",
            "final",
            "turn.done",
        ]

        # The turn that is killed: `work` has emitted its event, not finished.
        watcher = await hold_turn(nc, client, "hold-js", agent=AGENT, thread_id="th-hold-js")
        watchers.append(watcher)
        await first.kill()

        await js_agents.start("js-replica-1", hold_work=True)
        transcript = await watcher.finished()

        # Exactly the transcript of the uninterrupted run, after one reset.
        assert sum(isinstance(f, Reset) for f in watcher.frames) == 1
        assert seen_by_a_reader(transcript.events) == seen_by_a_reader(uninterrupted.events)
        assert {e.attempt for e in transcript.events if e.seq > 2} == {1}

        # The completed step (plan) did not run again; the one that was running did.
        runs = [line.split() for line in js_agents.side_log.read_text().splitlines()]
        assert [r for r in runs if len(r) == 3 and r[1] == "hold-js"] == [
            ["plan", "hold-js", "0"],
            ["work", "hold-js", "0"],
            ["work", "hold-js", "1"],
            ["answer", "hold-js", "1"],
        ]

        # One rewind on NATS, by the time the turn's end got there.
        await until(
            seen,
            lambda: any(m["type"] == "turn.done" for m in seen.on(".turn.events.hold-js")),
        )
        rewinds = [m for m in seen.on(".turn.rewind") if m["turn_id"] == "hold-js"]
        assert len(rewinds) == 1, rewinds
        assert rewinds[0]["attempt"] == 1
    finally:
        for w in watchers:
            await w.close()


async def test_a_js_execution_whose_attempt_was_redriven_away_stops_and_writes_nothing_more(
    js_agents: NodeAgents, bus: tuple[Client, Collector], client: AsyncTurnkeeperClient
) -> None:
    nc, _seen = bus
    agent = await js_agents.start("js-replica-zombie", hold_work=True)
    watcher: Watcher | None = None
    try:
        watcher = await hold_turn(nc, client, "hold-zombie", agent=AGENT)

        # Another incarnation of the replica (the same code, so the same graph
        # version: docs/versions.md) takes the turn over while this execution still
        # runs: its attempt is fenced from now on.
        held = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="hold-zombie"))).turn
        assert held.graph.fingerprint, "the runner recorded its graph version"
        taken = await client.redrive(
            turns_pb2.RedriveRequest(
                agent=AGENT,
                replica="js-replica-zombie",
                incarnation="another-process",
                graph=turns_pb2.GraphVersion(
                    fingerprint=held.graph.fingerprint, label=held.graph.label
                ),
            )
        )
        assert [(r.turn.turn_id, r.turn.attempts) for r in taken.turns] == [("hold-zombie", 1)]
        await agent.wait_line(
            lambda line: "turn_id=hold-zombie attempt=0" in line and "was refused" in line
        )
        await agent.wait_line(lambda line: "this execution stops" in line)

        # The new attempt ends the turn; the zombie wrote nothing after the rewind.
        await client.finish_turn(
            turns_pb2.FinishTurnRequest(
                turn_id="hold-zombie", attempt=1, outcome=turns_pb2.OUTCOME_DONE
            )
        )
        transcript = await watcher.finished()
        events = (
            await client.list_events(turns_pb2.ListEventsRequest(turn_id="hold-zombie"))
        ).events
        assert [(e.attempt, e.type) for e in events] == [
            (0, "token"),
            (0, "step"),
            (1, "turn.done"),
        ]
        assert [e.type for e in transcript.events] == ["token", "step", "turn.done"]
        assert agent.proc.returncode is None, "the agent process itself goes on"
        runs = js_agents.side_log.read_text().splitlines()
        assert [r for r in runs if "hold-zombie" in r] == [
            "plan hold-zombie 0",
            "work hold-zombie 0",
            "holding hold-zombie",
        ]
    finally:
        if watcher is not None:
            await watcher.close()


async def test_a_js_agent_restarted_while_nats_is_away_waits_for_it_then_finishes_its_orphan(
    js_agents: NodeAgents,
    bus: tuple[Client, Collector],
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
) -> None:
    nc, _seen = bus
    first = await js_agents.start("js-replica-no-nats", hold_work=True)
    watcher: Watcher | None = None
    try:
        watcher = await hold_turn(nc, client, "hold-no-nats", agent=AGENT)
        await first.kill()

        nats_server.stop()
        second = await js_agents.spawn("js-replica-no-nats", hold_work=True)
        # Not ready without NATS: the startup re-drive waits for /healthz 200
        # (decision 193), and nothing runs the turn meanwhile.
        waiting = await second.wait_line(
            lambda line: "startup Redrive waits for /healthz 200" in line
        )
        assert "NATS" in waiting
        nats_server.start()
        await second.ready()
        transcript = await watcher.finished()
        assert [e.type for e in transcript.events][-2:] == ["final", "turn.done"]
        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="hold-no-nats"))
        assert (status.state, status.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
    finally:
        if watcher is not None:
            await watcher.close()
