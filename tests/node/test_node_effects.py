"""Exactly-once effects in a LangGraph.js agent (`effect` from
`@turnkeeper/client/agent`), against a real service, a real nats-server and the agent
as a real Node.js process SIGKILLed mid-step (clients/node/testing/agent.mjs, graph
`effects`: plan -> work -> answer, where work calls the effect `charge`, which appends
one line per execution to a side log: the receiver's count).

- killed after charge's outcome is recorded and before work's checkpoint: the
  re-driven work gets the recorded outcome and charge is not called again;
- killed inside charge (its intent recorded, its outcome not: uncertain): `retry`
  calls it again with the same key, `park` parks the turn with an interrupt naming the
  effect until an operator answers, `fail` fails the turn naming the effect;
- killed after charge's outcome is recorded, and the re-driven work charges another
  input or none: the service announces the superseded charge in the turn's events
  while the runner writes its own, and the re-driven execution finishes the turn
  (issue 46).

On SQLite alone (decision 710): the crash is the Node agent's, and the service's
side of it, the ledger's rows in PostgreSQL, is what tests/effects/test_effect_crash.py
(a recorded outcome, the park policy and both divergent re-runs, with a Python agent)
and tests/service/effects/test_effect_ledger.py (every state of a row, an uncertain
one included) check on both backends.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2 as pb

from tests.support.agents import Agent, result
from tests.support.nats import NatsServer
from tests.support.node import NodeAgents, Watcher

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGENT = "js-effects"
Spawn = Callable[[str], Awaitable[Agent]]


@pytest.fixture
def side_log(js_agents: NodeAgents) -> Path:
    return js_agents.side_log


@pytest.fixture
async def spawn(js_agents: NodeAgents) -> AsyncIterator[Spawn]:
    """The replica, with charge's uncertain calls resolved by `policy`; SIGKILLed at
    the end (no graceful stop to wait for)."""

    async def start(policy: str) -> Agent:
        return await js_agents.start(
            "js-fx-1", graph="effects", extra_env={"EFFECT_POLICY": policy}
        )

    yield start
    for agent in js_agents.spawned:
        await agent.kill()


def charges(side_log: Path, turn_id: str) -> list[tuple[str, str]]:
    """(attempt, key) of each execution of charge in the turn."""
    rows = [line.split() for line in side_log.read_text().splitlines()]
    return [(r[2], r[3]) for r in rows if r[0] == "charge" and r[1] == turn_id]


def ran(side_log: Path, node: str, turn_id: str) -> list[str]:
    """The attempt of each run of `node` in the turn."""
    rows = [line.split() for line in side_log.read_text().splitlines()]
    return [r[2] for r in rows if r[:2] == [node, turn_id]]


async def ledger(client: AsyncTurnkeeperClient, turn_id: str) -> list[pb.Effect]:
    return list((await client.list_effects(pb.ListEffectsRequest(turn_id=turn_id))).effects)


async def start_turn(
    nats_server: NatsServer, client: AsyncTurnkeeperClient, turn_id: str
) -> Watcher:
    nc = await nats.connect(nats_server.url)
    try:
        await result(
            nc,
            "responses/create",
            {"input": "order-7", "turn_id": turn_id, "background": True},
            agent=AGENT,
        )
    finally:
        await nc.close()
    return Watcher(client, turn_id)


def receipts(watcher: Watcher) -> list[Any]:
    final = [e for e in watcher.transcript.events if e.type == "final"]
    assert len(final) == 1, watcher.frames
    log = final[0].data["output"]["log"]
    return [json.loads(entry.split(":", 1)[1]) for entry in log if entry.startswith("receipt:")]


async def test_a_recorded_outcome_is_returned_after_a_crash_without_calling_again(
    spawn: Spawn, nats_server: NatsServer, client: AsyncTurnkeeperClient, side_log: Path
) -> None:
    first = await spawn("park")
    watcher = await start_turn(nats_server, client, "hold-after-1")
    try:
        await watcher.until_event("token", "work", text="charged")
        await first.kill()
        await spawn("park")
        await watcher.finished()
    finally:
        await watcher.close()

    # Charged once, in the killed attempt; the re-driven work got its receipt.
    [(attempt, key)] = charges(side_log, "hold-after-1")
    assert attempt == "0" and key.startswith("fx-")
    assert receipts(watcher) == [{"charged": "order-7", "key": key}]
    [row] = await ledger(client, "hold-after-1")
    assert (row.name, row.key, row.state) == ("charge", key, pb.EFFECT_STATE_DONE)
    assert json.loads(row.args_json) == {"input": "order-7"}


@pytest.mark.parametrize("policy", ["retry", "park", "fail"])
async def test_an_uncertain_call_is_resolved_by_its_policy(
    policy: str,
    spawn: Spawn,
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
    side_log: Path,
) -> None:
    turn_id = f"hold-in-{policy}"
    first = await spawn(policy)
    watcher = await start_turn(nats_server, client, turn_id)
    try:
        await watcher.until_event("token", "work", text="charging")
        await first.kill()
        await spawn(policy)
        if policy == "park":
            await watcher.until(lambda e: e.type == "interrupt")
            [interrupt] = [e for e in watcher.transcript.events if e.type == "interrupt"]
            question = json.dumps(interrupt.data)
            assert "turnkeeper.effect.uncertain" in question and "charge" in question
            status = await client.turn_status(pb.TurnStatusRequest(turn_id=turn_id))
            assert status.state == pb.TURN_STATE_PARKED
            nc = await nats.connect(nats_server.url)
            try:
                await result(
                    nc,
                    "responses/resumeDetached",
                    {
                        "turn_id": turn_id,
                        "resume": {
                            "happened": True,
                            "result": {"charged": "order-7", "key": "by-hand"},
                        },
                    },
                    agent=AGENT,
                )
            finally:
                await nc.close()
        await watcher.finished()
    finally:
        await watcher.close()

    calls = charges(side_log, turn_id)
    [row] = await ledger(client, turn_id)
    status = await client.turn_status(pb.TurnStatusRequest(turn_id=turn_id))
    if policy == "retry":
        # Called again, with the same key: a receiver that drops a repeated key acts once.
        assert [a for a, _ in calls] == ["0", "1"] and calls[0][1] == calls[1][1] == row.key
        assert row.state == pb.EFFECT_STATE_DONE
        assert status.state == pb.TURN_STATE_DONE
    elif policy == "park":
        # Not called again: the operator's answer is its outcome.
        assert [a for a, _ in calls] == ["0"]
        assert (row.state, json.loads(row.outcome_json)) == (
            pb.EFFECT_STATE_RESOLVED,
            {"charged": "order-7", "key": "by-hand"},
        )
        assert receipts(watcher) == [{"charged": "order-7", "key": "by-hand"}]
        assert status.state == pb.TURN_STATE_DONE
    else:
        assert [a for a, _ in calls] == ["0"]
        assert row.state == pb.EFFECT_STATE_INTENT
        assert status.state == pb.TURN_STATE_FAILED
        assert "charge" in status.error and "may or may not have happened" in status.error


@pytest.mark.parametrize("diverge", ["diverge", "skip"])
async def test_a_re_run_that_diverges_finishes_in_its_own_execution_announcing_it(
    diverge: str,
    spawn: Spawn,
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
    side_log: Path,
) -> None:
    turn_id = f"hold-after-{diverge}-1"
    first = await spawn("retry")
    watcher = await start_turn(nats_server, client, turn_id)
    try:
        await watcher.until_event("token", "work", text="charged")
        [row] = await ledger(client, turn_id)
        await first.kill()
        await spawn("retry")
        await watcher.finished()
    finally:
        await watcher.close()

    # Finished by the re-driven execution (attempt 1): no write of it was refused,
    # which would have stopped it and left the turn to a re-drive after its lease.
    status = await client.turn_status(pb.TurnStatusRequest(turn_id=turn_id))
    assert (status.state, status.attempts) == (pb.TURN_STATE_DONE, 1)
    assert ran(side_log, "answer", turn_id) == ["1"]
    events = list((await client.list_events(pb.ListEventsRequest(turn_id=turn_id))).events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    [announced] = [e for e in events if e.type == "effect.superseded"]
    data = json.loads(announced.data_json)
    assert (data["key"], data["args"]) == (row.key, {"input": "order-7"})
    assert announced.attempt == 1 and events[-1].type == "turn.done"
    # A follower shows exactly the retained events, in order, across the rewind.
    shown = [(e.seq, e.type) for e in watcher.transcript.events if not e.terminal]
    assert shown == [(e.seq, e.type) for e in events[:-1]]
    [superseded] = [e for e in await ledger(client, turn_id) if e.key == row.key]
    assert superseded.state == pb.EFFECT_STATE_SUPERSEDED
