"""`turnkeeper.agent.effect` in real graphs against a real service, on both backends:
a call whose outcome is recorded is not made again after a "crash" (the run
cancelled between the call and the step's checkpoint) and a re-drive; keys are the
same across executions and different for different calls; each uncertain policy;
a recorded error; a divergent re-execution superseding the recorded call.

A crash is the run's task cancelled while the node waits after its effect returned
(so no writes and no checkpoint are stored for the step), then a forced Redrive and
a claim, as a replica's re-drive does, and the graph run again from its checkpoint
with the new attempt (the bridge's `invoke(None)`).
"""

from __future__ import annotations

import asyncio
import json
import operator
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict, cast
from uuid import uuid4

import pytest
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Command, RetryPolicy
from turnkeeper.agent.effect import (
    EffectFailed,
    EffectUncertain,
    Policy,
    effect,
    effect_key,
    journal_replies,
)
from turnkeeper.agent.effect._snapshot import CONFIG_KEY as SNAPSHOT_KEY
from turnkeeper.agent.effect._snapshot import LedgerSnapshot
from turnkeeper.agent.saver import RemoteSaver, durable_config, durable_run_kwargs
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer

# The turn is r1's, run by the test's own graphs between crash points and explicit
# re-drives, with no agent to renew its lease (decision 690).
pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(120), pytest.mark.unrenewed]


class State(TypedDict, total=False):
    orders: list[int]
    results: Annotated[list[Any], operator.add]


@dataclass
class Receiver:
    """Counts every execution by idempotency key, as a payment API would see them."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    # Set once a call was made; the node then waits on `gate` (a crash point).
    called: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)

    def keys(self) -> list[str]:
        return [k for k, _ in self.calls]


@dataclass
class Turn:
    client: AsyncTurnkeeperClient
    saver: RemoteSaver
    turn_id: str
    thread_id: str
    attempt: int = 0

    def config(self) -> Any:
        return durable_config(self.thread_id, self.turn_id, self.attempt)

    async def redrive(self) -> None:
        """What a replica's re-drive does: attempt + 1, claimed by a new incarnation."""
        redriven = await self.client.redrive(pb.RedriveRequest(turn_id=self.turn_id, force=True))
        self.attempt = redriven.turns[0].turn.attempts
        await self.client.claim_turn(
            pb.ClaimTurnRequest(
                turn_id=self.turn_id, attempt=self.attempt, replica="r1", incarnation=uuid4().hex
            )
        )

    async def effects(self) -> list[pb.Effect]:
        listed = await self.client.list_effects(pb.ListEffectsRequest(turn_id=self.turn_id))
        return list(listed.effects)

    async def events(self) -> list[tuple[str, dict[str, Any]]]:
        listed = await self.client.list_events(pb.ListEventsRequest(turn_id=self.turn_id))
        return [(e.type, json.loads(e.data_json)) for e in listed.events]


@pytest.fixture
async def turn(service: TurnkeeperServer, client: AsyncTurnkeeperClient) -> AsyncIterator[Turn]:
    turn_id, thread_id = f"t-{uuid4().hex[:8]}", f"th-{uuid4().hex[:8]}"
    await client.start_turn(
        pb.StartTurnRequest(
            turn_id=turn_id, thread_id=thread_id, agent="fx", replica="r1", incarnation="i1"
        )
    )
    saver = RemoteSaver(service.address)
    yield Turn(client, saver, turn_id, thread_id)
    await saver.aclose()


def graph(saver: RemoteSaver, act: Callable[[State], Any]) -> CompiledStateGraph[Any]:
    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("act", cast(Any, act))  # a sync or an async node
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    return builder.compile(checkpointer=saver)


async def crash_after_calls(
    turn: Turn, g: CompiledStateGraph[Any], receiver: Receiver, inputs: Any
) -> None:
    """Run until the node made its calls, then kill the run before its step is stored."""
    run = asyncio.create_task(g.ainvoke(inputs, turn.config(), **durable_run_kwargs()))
    await receiver.called.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    await turn.redrive()
    receiver.called.clear()
    receiver.gate.set()


async def test_a_recorded_call_is_not_made_again_after_a_crash_and_a_redrive(turn: Turn) -> None:
    receiver = Receiver()

    @effect
    async def charge(order: int, *, key: str = "") -> dict[str, Any]:
        receiver.calls.append((key, order))
        return {"charge": f"ch-{order}", "key": key}

    async def act(state: State) -> State:
        results = [await charge(order) for order in state["orders"]]
        receiver.called.set()
        await receiver.gate.wait()
        return {"results": results}

    g = graph(turn.saver, act)
    await crash_after_calls(turn, g, receiver, {"orders": [1, 2]})
    assert len(receiver.calls) == 2
    done = await g.ainvoke(None, turn.config(), **durable_run_kwargs())

    # Each charge was made once; the re-drive got the recorded results back.
    assert [order for _, order in receiver.calls] == [1, 2]
    first_keys = receiver.keys()
    assert done["results"] == [
        {"charge": "ch-1", "key": first_keys[0]},
        {"charge": "ch-2", "key": first_keys[1]},
    ]
    # Different calls, different keys; each key as the ledger recorded it.
    assert first_keys[0] != first_keys[1]
    ledger = await turn.effects()
    assert [(e.key, e.state, e.attempt, e.policy) for e in ledger] == [
        (first_keys[0], pb.EFFECT_STATE_DONE, 0, pb.EFFECT_POLICY_RETRY),
        (first_keys[1], pb.EFFECT_STATE_DONE, 0, pb.EFFECT_POLICY_RETRY),
    ]
    assert [json.loads(e.args_json) for e in ledger] == [{"order": 1}, {"order": 2}]


async def test_a_sync_effect_in_a_sync_graph_is_recorded_and_replayed(turn: Turn) -> None:
    made: list[str] = []

    @effect(name="send_mail")
    def send(to: str) -> str:
        made.append(effect_key())
        return f"sent to {to}"

    calls = {"n": 0}

    def act(state: State) -> State:
        calls["n"] += 1
        return {"results": [send("ada"), send("bob")]}

    g = graph(turn.saver, act)
    first = await asyncio.to_thread(
        lambda: g.invoke({"orders": []}, turn.config(), **durable_run_kwargs())
    )
    assert first["results"] == ["sent to ada", "sent to bob"]
    # Two calls of one effect in one task: two keys, in call order.
    ledger = await turn.effects()
    assert [(e.name, e.call_index, e.key) for e in ledger] == [
        ("send_mail", 0, made[0]),
        ("send_mail", 1, made[1]),
    ]
    # A function without a key parameter parks by default.
    assert {e.policy for e in ledger} == {pb.EFFECT_POLICY_PARK}


async def test_a_recorded_error_is_raised_again_without_a_call(turn: Turn) -> None:
    receiver = Receiver()

    class Declined(Exception):
        pass

    @effect
    async def charge(order: int, *, key: str = "") -> None:
        receiver.calls.append((key, order))
        raise Declined("card declined")

    async def act(state: State) -> State:
        outcome: list[Any] = []
        try:
            await charge(1)
        except EffectFailed as exc:
            outcome.append(f"recorded {exc.error_type}: {exc.error_message}")
        except Declined:
            outcome.append("raised by the function")
        receiver.called.set()
        await receiver.gate.wait()
        return {"results": outcome}

    g = graph(turn.saver, act)
    await crash_after_calls(turn, g, receiver, {"orders": [1]})
    done = await g.ainvoke(None, turn.config(), **durable_run_kwargs())
    assert len(receiver.calls) == 1
    # The first execution saw the function's own error; the re-drive the recorded one.
    assert done["results"] == ["recorded Declined: card declined"]
    [row] = await turn.effects()
    assert row.state == pb.EFFECT_STATE_FAILED
    assert json.loads(row.outcome_json) == {"type": "Declined", "message": "card declined"}


async def uncertain(turn: Turn, policy: Policy) -> tuple[Receiver, CompiledStateGraph[Any]]:
    """A call that dies while it runs: the first execution is killed inside it."""
    receiver = Receiver()

    @effect(name="file_ticket", policy=policy)
    async def file_ticket(title: str) -> str:
        receiver.calls.append((effect_key(), title))
        receiver.called.set()
        await receiver.gate.wait()  # the process dies here, the first time
        return f"ticket for {title}"

    async def act(state: State) -> State:
        return {"results": [await file_ticket("printer on fire")]}

    g = graph(turn.saver, act)
    await crash_after_calls(turn, g, receiver, {"orders": []})
    return receiver, g


async def test_retry_calls_an_uncertain_effect_again_with_the_same_key(turn: Turn) -> None:
    receiver, g = await uncertain(turn, "retry")
    assert await turn.effects() == []  # a retry records no intent before the call
    done = await g.ainvoke(None, turn.config(), **durable_run_kwargs())
    assert done["results"] == ["ticket for printer on fire"]
    # Called twice: a receiver that deduplicates by key applies it once.
    assert len(receiver.calls) == 2 and receiver.keys()[0] == receiver.keys()[1]
    [row] = await turn.effects()
    assert (row.state, row.attempt) == (pb.EFFECT_STATE_DONE, 1)


async def test_park_asks_and_uses_the_operator_s_answer(turn: Turn) -> None:
    receiver, g = await uncertain(turn, "park")
    [row] = await turn.effects()
    assert row.state == pb.EFFECT_STATE_INTENT
    parked = await g.ainvoke(None, turn.config(), **durable_run_kwargs())
    [interrupt] = parked["__interrupt__"]
    assert interrupt.value["type"] == "turnkeeper.effect.uncertain"
    assert (interrupt.value["effect"], interrupt.value["key"], interrupt.value["args"]) == (
        "file_ticket",
        row.key,
        {"title": "printer on fire"},
    )
    done = await g.ainvoke(
        Command(resume={"happened": True, "result": "ticket T-9"}),
        turn.config(),
        **durable_run_kwargs(),
    )
    assert done["results"] == ["ticket T-9"]
    assert len(receiver.calls) == 1  # not called again: the operator said it happened
    [row] = await turn.effects()
    assert (row.state, json.loads(row.outcome_json)) == (pb.EFFECT_STATE_RESOLVED, "ticket T-9")


async def test_park_runs_the_call_when_the_operator_says_it_did_not_happen(turn: Turn) -> None:
    receiver, g = await uncertain(turn, "park")
    await g.ainvoke(None, turn.config(), **durable_run_kwargs())
    done = await g.ainvoke(
        Command(resume={"happened": False}), turn.config(), **durable_run_kwargs()
    )
    assert done["results"] == ["ticket for printer on fire"]
    assert len(receiver.calls) == 2 and receiver.keys()[0] == receiver.keys()[1]
    [row] = await turn.effects()
    assert row.state == pb.EFFECT_STATE_DONE


async def test_fail_fails_the_run_naming_the_effect(turn: Turn) -> None:
    receiver, g = await uncertain(turn, "fail")
    with pytest.raises(EffectUncertain) as info:
        await g.ainvoke(None, turn.config(), **durable_run_kwargs())
    assert "'file_ticket'" in str(info.value) and "printer on fire" in str(info.value)
    assert len(receiver.calls) == 1


async def test_a_divergent_re_execution_supersedes_and_says_so(turn: Turn) -> None:
    receiver = Receiver()
    plan = {"orders": [1, 2]}

    @effect
    async def charge(order: int, *, key: str = "") -> str:
        receiver.calls.append((key, order))
        return f"ch-{order}"

    async def act(state: State) -> State:
        # The "model" answers differently after the crash: other orders.
        results = [await charge(order) for order in plan["orders"]]
        receiver.called.set()
        await receiver.gate.wait()
        return {"results": results}

    g = graph(turn.saver, act)
    await crash_after_calls(turn, g, receiver, {"orders": []})
    plan["orders"] = [3]
    done = await g.ainvoke(None, turn.config(), **durable_run_kwargs())
    assert done["results"] == ["ch-3"]
    keys = receiver.keys()
    # The first call was made again with other arguments: a new key, so a receiver
    # deduplicating by key does not answer it with the old charge.
    assert keys[2] == f"{keys[0]}~1"
    states = {e.key: (e.state, json.loads(e.args_json)) for e in await turn.effects()}
    assert states == {
        keys[0]: (pb.EFFECT_STATE_SUPERSEDED, {"order": 1}),
        keys[1]: (pb.EFFECT_STATE_SUPERSEDED, {"order": 2}),
        keys[2]: (pb.EFFECT_STATE_DONE, {"order": 3}),
    }
    superseded = [d for t, d in await turn.events() if t == "effect.superseded"]
    announced = {(d["key"], d["args"]["order"]) for d in superseded}
    assert announced == {(keys[0], 1), (keys[1], 2)}
    assert any("not made again" in d["detail"] for d in superseded)
    assert any("other arguments" in d["detail"] for d in superseded)


async def test_outside_a_turn_the_function_is_simply_called() -> None:
    @effect
    def add(a: int, b: int) -> int:
        return a + b

    assert add(1, 2) == 3


async def test_journaled_model_replies_are_reused_by_the_redrive(turn: Turn) -> None:
    # Two replies and no more: a third call of the model would fail.
    model = journal_replies(
        GenericFakeChatModel(
            messages=iter([AIMessage(content="first"), AIMessage(content="second")])
        )
    )
    receiver = Receiver()

    async def act(state: State) -> State:
        replies = [await model.ainvoke(q) for q in ("plan it", "write it")]
        receiver.called.set()
        await receiver.gate.wait()
        return {"results": [str(r.content) for r in replies]}

    g = graph(turn.saver, act)
    await crash_after_calls(turn, g, receiver, {"orders": []})
    done = await g.ainvoke(None, turn.config(), **durable_run_kwargs())
    assert done["results"] == ["first", "second"]
    ledger = await turn.effects()
    assert [(e.name, e.call_index, e.state, e.attempt) for e in ledger] == [
        ("model:GenericFakeChatModel", 0, pb.EFFECT_STATE_DONE, 0),
        ("model:GenericFakeChatModel", 1, pb.EFFECT_STATE_DONE, 0),
    ]


async def test_a_retry_policy_try_is_a_new_call_and_each_try_keeps_its_outcome(
    turn: Turn,
) -> None:
    made: list[str] = []
    tries = {"n": 0}

    @effect
    async def notify(who: str, *, key: str = "") -> str:
        made.append(key)
        return f"notified {who}"

    async def act(state: State) -> State:
        tries["n"] += 1
        note = await notify("ops")
        if tries["n"] == 1:
            raise ConnectionError("the node's own step after the effect failed")
        return {"results": [note]}

    builder: StateGraph[Any] = StateGraph(State)
    builder.add_node("act", act, retry_policy=RetryPolicy(max_attempts=2, initial_interval=0.01))
    builder.add_edge(START, "act")
    builder.add_edge("act", END)
    g = builder.compile(checkpointer=turn.saver)
    done = await g.ainvoke({"orders": []}, turn.config(), **durable_run_kwargs())
    assert done["results"] == ["notified ops"]
    # RetryPolicy ran the node again: its second try's call is a call of its own.
    assert len(made) == 2 and made[0] != made[1]
    # Both tries' calls stay recorded: the task's writes name both as made.
    assert [(e.key, e.state) for e in await turn.effects()] == [
        (made[0], pb.EFFECT_STATE_DONE),
        (made[1], pb.EFFECT_STATE_DONE),
    ]


async def test_with_the_run_s_snapshot_a_new_retry_call_asks_nothing_before_it_runs(
    turn: Turn,
) -> None:
    """The bridge gives each run a LedgerSnapshot (decision 260): the turn's ledger is
    read once, a `retry` call whose key has no row runs without BeginEffect, and a
    key with a row still asks, so a re-drive gets the recorded outcome as before."""
    receiver = Receiver()
    begun: list[str] = []
    listed: list[str] = []
    begin, list_effects = turn.saver.abegin_effect, turn.saver.alist_effects

    async def counting_begin(request: pb.BeginEffectRequest) -> pb.BeginEffectResponse:
        begun.append(request.call.key)
        return await begin(request)

    async def counting_list(turn_id: str) -> Any:
        listed.append(turn_id)
        return await list_effects(turn_id)

    turn.saver.abegin_effect = counting_begin  # type: ignore[method-assign]
    turn.saver.alist_effects = counting_list  # type: ignore[method-assign]

    @effect
    async def charge(order: int, *, key: str = "") -> dict[str, Any]:
        receiver.calls.append((key, order))
        return {"charge": f"ch-{order}", "key": key}

    async def act(state: State) -> State:
        results = [await charge(order) for order in state["orders"]]
        receiver.called.set()
        await receiver.gate.wait()
        return {"results": results}

    def with_snapshot() -> Any:
        config = turn.config()
        config["configurable"][SNAPSHOT_KEY] = LedgerSnapshot()
        return config

    g = graph(turn.saver, act)
    run = asyncio.create_task(
        g.ainvoke({"orders": [1, 2, 3]}, with_snapshot(), **durable_run_kwargs())
    )
    await receiver.called.wait()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    # One read of the ledger for the run, no BeginEffect: three charges made.
    assert (len(listed), begun, len(receiver.calls)) == (1, [], 3)

    await turn.redrive()
    receiver.called.clear()
    receiver.gate.set()
    done = await g.ainvoke(None, with_snapshot(), **durable_run_kwargs())
    # The re-drive's run read the ledger once more; every key had a row, so each
    # asked, and got its recorded outcome without a charge.
    keys = receiver.keys()
    assert (len(listed), begun, len(receiver.calls)) == (2, keys, 3)
    assert done["results"] == [
        {"charge": f"ch-{o}", "key": k} for o, k in zip((1, 2, 3), keys, strict=True)
    ]
    ledger = await turn.effects()
    assert [(e.key, e.state) for e in ledger] == [(k, pb.EFFECT_STATE_DONE) for k in keys]
