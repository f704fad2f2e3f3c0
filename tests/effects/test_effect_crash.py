"""Exactly-once across a real crash: a bridge-run agent (tests/agents/job_agent.py,
graph `effects`) whose tool charges a separate receiver process through an effect
is SIGKILLed after the charge's outcome is recorded and before its step's
checkpoint; a second replica re-drives the turn and re-runs the step, and the
receiver counts one execution. And with the `park` policy, killed while the charge
runs: the re-drive parks the turn naming the uncertain charge, and the operator's
answer is used without charging again. And a re-run that diverges (the charge made
with another amount, or not at all): the service announces the superseded charge in
the turn's events while the bridge goes on writing its own, and the re-driven
execution finishes the turn without a write refused (issue 46). On both backends.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import AsyncIterator
from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2

from tests.support.agents import (
    Agents,
    Panel,
    all_events,
    job_turn,
    result,
    shape,
    until_event,
)
from tests.support.nats import Collector
from tests.support.procs import listener

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120), pytest.mark.both_backends]


@pytest.fixture
async def receiver() -> AsyncIterator[str]:
    """The receiver's URL, its process started for the test and stopped after."""
    async with listener("tests.support.receiver") as url:
        yield url


def counts(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/counts", timeout=10) as answer:
        counted: dict[str, Any] = json.loads(answer.read())
        return counted


async def test_a_charge_recorded_before_a_sigkill_is_not_made_again_by_the_redrive(
    agents: Agents,
    client: AsyncTurnkeeperClient,
    bus: tuple[Client, Collector],
    receiver: str,
) -> None:
    nc, _ = bus
    env = {"RECEIVER_URL": receiver}
    first = await agents.start(graph="effects", extra_env=env)
    second = await agents.spawn(graph="effects", warm=True, extra_env=env)

    await result(nc, "responses/create", job_turn("t-pay", "th-pay", job="invoice"))
    panel = Panel()
    panel.start(client, "t-pay")
    # The tool returned: the charge is at the receiver and its outcome in the ledger;
    # the node now waits before its step's checkpoint.
    await first.wait_line(lambda line: line == "paid attempt=0")
    [row] = (await client.list_effects(turns_pb2.ListEffectsRequest(turn_id="t-pay"))).effects
    assert (row.state, row.attempt) == (turns_pb2.EFFECT_STATE_DONE, 0)
    await first.kill()
    await second.go()
    shown = await panel.ended()
    assert shown[-1][1] == "turn.done"

    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t-pay"))
    assert (status.state, status.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
    # The step ran again, the tool again, but the charge was not made again.
    side = agents.side()
    assert [line for line in side if line.startswith("start pay")] == [
        "start pay attempt=0",
        "start pay attempt=1",
    ]
    seen = counts(receiver)
    assert seen["executions"] == {row.key: 1}, seen
    # Both executions answered with the one charge the receiver applied.
    charge = seen["applied"][row.key]["charge"]
    paid = [line.split(": ", 1)[1] for line in side if line.startswith("paid ")]
    assert paid == [f"paid 42: {charge}", f"paid 42: {charge}"]
    [after] = (await client.list_effects(turns_pb2.ListEffectsRequest(turn_id="t-pay"))).effects
    assert (after.key, after.state, after.attempt) == (row.key, turns_pb2.EFFECT_STATE_DONE, 0)


async def test_an_uncertain_charge_parks_and_the_operator_s_answer_is_used(
    agents: Agents,
    client: AsyncTurnkeeperClient,
    bus: tuple[Client, Collector],
    receiver: str,
) -> None:
    nc, seen = bus
    env = {"RECEIVER_URL": receiver, "EFFECT_POLICY": "park", "CHARGE_HANGS": "1"}
    first = await agents.start(graph="effects", extra_env=env)
    second = await agents.spawn(graph="effects", warm=True, extra_env=env)
    await result(nc, "responses/create", job_turn("t-unsure", "th-unsure", job="invoice"))
    # The receiver applied the charge; the agent dies before the outcome is recorded.
    await first.wait_line(lambda line: line == "charged, hanging")
    [row] = (await client.list_effects(turns_pb2.ListEffectsRequest(turn_id="t-unsure"))).effects
    assert row.state == turns_pb2.EFFECT_STATE_INTENT
    await first.kill()
    await second.go()

    # The re-drive finds the call uncertain and parks the turn, naming it.
    await until_event(seen, "t-unsure", "interrupt")
    turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t-unsure"))).turn
    assert turn.state == turns_pb2.TURN_STATE_PARKED
    asked = json_format.MessageToDict(turn.interrupt)
    assert (asked["type"], asked["effect"], asked["key"], asked["args"]) == (
        "turnkeeper.effect.uncertain",
        "charge",
        row.key,
        {"amount": 42},
    )
    # The operator checks the receiver for the key and answers: it happened.
    applied = counts(receiver)["applied"][row.key]
    panel = Panel()
    panel.start(client, "t-unsure")
    resume = struct_pb2.Value()
    json_format.ParseDict({"happened": True, "result": applied}, resume)
    await client.resume_detached(turns_pb2.ResumeDetachedRequest(turn_id="t-unsure", resume=resume))
    shown = await panel.ended()
    assert shown[-1][1] == "turn.done"

    assert counts(receiver)["executions"] == {row.key: 1}
    [after] = (await client.list_effects(turns_pb2.ListEffectsRequest(turn_id="t-unsure"))).effects
    assert (after.state, json.loads(after.outcome_json)) == (
        turns_pb2.EFFECT_STATE_RESOLVED,
        applied,
    )
    paid = [line for line in agents.side() if line.startswith("paid ")]
    assert paid == [f"paid attempt=1: paid 42: {applied['charge']}"]


@pytest.mark.parametrize("diverge", ["amount", "skip"])
async def test_a_re_run_that_diverges_finishes_in_its_own_execution_announcing_it(
    agents: Agents,
    client: AsyncTurnkeeperClient,
    bus: tuple[Client, Collector],
    receiver: str,
    diverge: str,
) -> None:
    nc, _ = bus
    env = {"RECEIVER_URL": receiver, "DIVERGE": diverge}
    first = await agents.start(graph="effects", extra_env=env)
    second = await agents.spawn(graph="effects", warm=True, extra_env=env)
    turn_id = f"t-{diverge}"
    await result(nc, "responses/create", job_turn(turn_id, f"th-{diverge}", job="invoice"))
    panel = Panel()
    panel.start(client, turn_id)
    # The charge's outcome is recorded; the node waits before its step's checkpoint.
    await first.wait_line(lambda line: line == "paid attempt=0")
    [row] = (await client.list_effects(turns_pb2.ListEffectsRequest(turn_id=turn_id))).effects
    await first.kill()
    await second.go()
    shown = await panel.ended()

    # The re-driven execution (attempt 1) finished the turn: none of its writes was
    # refused, which would have stopped it and left the turn to a second re-drive
    # after its lease.
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
    assert (status.state, status.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
    side = agents.side()
    assert [line for line in side if line.endswith("attempt=2")] == []
    assert [line for line in side if line.startswith(("start pay", "start step2"))] == [
        "start pay attempt=0",
        "start pay attempt=1",
        "start step2 attempt=1",
    ]

    # The recorded charge is superseded, and said so once, in the re-run's place in
    # the stream: after the re-run pay step, before step 2.
    charged = counts(receiver)["applied"][row.key]
    effects = (await client.list_effects(turns_pb2.ListEffectsRequest(turn_id=turn_id))).effects
    assert (effects[0].key, effects[0].state) == (row.key, turns_pb2.EFFECT_STATE_SUPERSEDED)
    if diverge == "amount":
        assert [(e.key, e.state, json.loads(e.args_json)) for e in effects[1:]] == [
            (f"{row.key}~1", turns_pb2.EFFECT_STATE_DONE, {"amount": 43})
        ]
    else:
        assert len(effects) == 1
    events = await all_events(client, turn_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    [announced] = [e for e in events if e.type == "effect.superseded"]
    data = json.loads(announced.data_json)
    assert (data["key"], data["args"], data["outcome"]) == (row.key, {"amount": 42}, charged)
    assert announced.attempt == 1
    steps = [(e.seq, json.loads(e.data_json)["node"]) for e in events if e.type == "step"]
    pay_step = next(seq for seq, node in steps if node == "pay")
    step2 = next(seq for seq, node in steps if node == "step2")
    assert pay_step < announced.seq < step2
    assert {e.attempt for e in events if e.seq >= pay_step} == {1}
    assert [e.type for e in events[-2:]] == ["final", "turn.done"]
    # A watcher saw exactly the retained events, in order, across the rewind.
    assert shown == shape(events)
