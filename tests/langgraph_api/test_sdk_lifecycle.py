"""A run that stops for a person, resumed with Command(resume=...); double-texting
(multitask_strategy) on a busy thread; a run cancelled, with or without rollback."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import ConflictError, NotFoundError
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import operations_pb2, turns_pb2

# On SQLite and on PostgreSQL (a real cluster the tests start).
pytestmark = pytest.mark.both_backends

APPROVAL = "approval"
TOPIC: Any = {"topic": "turns"}


async def _parked(sdk: LangGraphClient) -> tuple[str, dict[str, Any]]:
    """A thread whose run waits at review's interrupt(); (thread_id, its run)."""
    thread = await sdk.threads.create()
    run = await sdk.runs.create(thread["thread_id"], APPROVAL, input=TOPIC)
    await sdk.runs.join(thread["thread_id"], run["run_id"])
    return thread["thread_id"], dict(run)


@pytest.mark.shared_deployment
async def test_interrupt_then_resume(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    parts = [
        p
        async for p in sdk.runs.stream(
            thread["thread_id"],
            APPROVAL,
            input=TOPIC,
            stream_mode=["values", "updates", "custom"],
        )
    ]
    assert [p.data for p in parts if p.event == "custom"] == [{"progress": "drafting"}]
    interrupts = [
        p.data["__interrupt__"] for p in parts if p.event == "updates" and "__interrupt__" in p.data
    ]
    assert interrupts and interrupts[0][0]["value"]["question"] == "approve the draft?"
    got = await sdk.threads.get(thread["thread_id"])
    assert got["status"] == "interrupted"
    state = await sdk.threads.get_state(thread["thread_id"])
    assert state["next"] == ["review"]
    assert state["tasks"][0]["interrupts"][0]["value"]["draft"] == "a draft about turns"
    waited: Any = await sdk.runs.wait(thread["thread_id"], APPROVAL, command={"resume": "yes"})
    assert waited["verdict"] == "approved"
    assert (await sdk.threads.get(thread["thread_id"]))["status"] == "idle"


@pytest.mark.shared_deployment
async def test_an_interrupted_thread_is_not_busy(sdk: LangGraphClient) -> None:
    """As on LangGraph's server: a run stopped at an interrupt is over, so a run under
    `reject` is accepted; it goes on from the thread's checkpoint."""
    thread_id, first = await _parked(sdk)
    second = await sdk.runs.create(thread_id, APPROVAL, input=TOPIC, multitask_strategy="reject")
    await sdk.runs.join(thread_id, second["run_id"])
    runs = {r["run_id"]: r["status"] for r in await sdk.runs.list(thread_id)}
    assert runs == {first["run_id"]: "success", second["run_id"]: "success"}


@pytest.mark.shared_deployment
async def test_interrupt_strategy_leaves_an_answered_run_done(
    sdk: LangGraphClient, client: AsyncTurnkeeperClient
) -> None:
    thread_id, first = await _parked(sdk)
    second = await sdk.runs.create(thread_id, APPROVAL, input=TOPIC, multitask_strategy="interrupt")
    # The parked run was over, not in the way: its turn ended answered, not cancelled.
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=first["run_id"]))
    assert status.state == turns_pb2.TURN_STATE_DONE
    assert status.end_reason == "answered"
    await sdk.runs.join(thread_id, second["run_id"])
    assert (await sdk.runs.get(thread_id, second["run_id"]))["status"] == "success"


@pytest.mark.shared_deployment
async def test_enqueue_on_an_interrupted_thread_runs_at_once(sdk: LangGraphClient) -> None:
    thread_id, _ = await _parked(sdk)
    queued = await sdk.runs.create(thread_id, APPROVAL, input=TOPIC, multitask_strategy="enqueue")
    await sdk.runs.join(thread_id, queued["run_id"])
    await sdk.runs.wait(thread_id, APPROVAL, command={"resume": "no"})
    runs = [r["status"] for r in await sdk.runs.list(thread_id)]
    assert runs == ["success", "success", "success"]
    state: Any = await sdk.threads.get_state(thread_id)
    assert state["values"]["verdict"] == "rejected"


@pytest.mark.shared_deployment
async def test_cancel_a_run(sdk: LangGraphClient, client: AsyncTurnkeeperClient) -> None:
    thread_id, run = await _parked(sdk)
    await sdk.runs.cancel(thread_id, run["run_id"], wait=True, action="rollback")
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run["run_id"]))
    assert status.state == turns_pb2.TURN_STATE_CANCELLED
    # rollback: the run's checkpoints went with it.
    state = await sdk.threads.get_state(thread_id)
    assert state["values"] == {}


async def test_delete_a_run(sdk: LangGraphClient, client: AsyncTurnkeeperClient) -> None:
    thread_id, run = await _parked(sdk)
    with pytest.raises(ConflictError, match="cancel it first"):
        await sdk.runs.delete(thread_id, run["run_id"])
    await sdk.runs.cancel(thread_id, run["run_id"], wait=True)
    await sdk.runs.delete(thread_id, run["run_id"])
    with pytest.raises(NotFoundError):
        await sdk.runs.get(thread_id, run["run_id"])
    status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run["run_id"]))
    assert status.state == turns_pb2.TURN_STATE_UNKNOWN
    audit = await client.list_audit(operations_pb2.ListAuditRequest())
    actions = [(r.action, r.target, r.outcome) for r in audit.records]
    assert ("delete_run", run["run_id"], "ok") in actions
    assert ("delete_run", run["run_id"], "FAILED_PRECONDITION") in actions


ASSISTANT = "durable-execution"
QUESTION: Any = {"messages": [{"role": "user", "content": "what is a fork?"}]}


@pytest.mark.shared_deployment
async def test_interrupt_before_stops_the_run_and_a_null_run_goes_on(
    sdk: LangGraphClient,
) -> None:
    thread = await sdk.threads.create()
    stopped: Any = await sdk.runs.wait(
        thread["thread_id"], ASSISTANT, input=QUESTION, interrupt_before=["plan"]
    )
    assert stopped["step"] == "analyze"
    state = await sdk.threads.get_state(thread["thread_id"])
    assert state["next"] == ["plan"]
    assert (await sdk.threads.get(thread["thread_id"]))["status"] == "interrupted"
    # submit(null): no input, no command; the run goes on past the interrupt.
    done: Any = await sdk.runs.wait(thread["thread_id"], ASSISTANT, input=None)
    assert done["step"] == "generate"
    assert (await sdk.threads.get_state(thread["thread_id"]))["next"] == []


@pytest.mark.shared_deployment
async def test_a_run_from_an_earlier_checkpoint_forks_the_thread(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    first: Any = await sdk.runs.wait(thread["thread_id"], ASSISTANT, input=QUESTION)
    history = await sdk.threads.get_history(thread["thread_id"], limit=20)
    after_analyze: Any = next(h for h in history if h["values"].get("step") == "analyze")  # type: ignore[union-attr]
    forked: Any = await sdk.runs.wait(
        thread["thread_id"],
        ASSISTANT,
        input=None,
        checkpoint_id=after_analyze["checkpoint"]["checkpoint_id"],
    )
    # plan and generate ran again from there: the same answer, a new branch.
    assert forked["step"] == "generate"
    assert forked["messages"][-1]["content"] == first["messages"][-1]["content"]
    newest: Any = await sdk.threads.get_history(thread["thread_id"], limit=50)
    assert len(newest) > len(history)
    # The new branch goes back to the checkpoint it forked from.
    by_id = {h["checkpoint"]["checkpoint_id"]: h for h in newest}
    chain, at = [], newest[0]
    while at is not None and at["parent_checkpoint"]:
        chain.append(at["checkpoint"]["checkpoint_id"])
        at = by_id.get(at["parent_checkpoint"]["checkpoint_id"])
    fork_point = after_analyze["checkpoint"]["checkpoint_id"]
    assert fork_point in chain
    # ... and not through the first run's answer: the branch left it.
    first_answer = history[0]["checkpoint"]["checkpoint_id"]
    assert first_answer not in chain


@pytest.mark.shared_deployment
async def test_a_command_with_update_and_goto(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    await sdk.runs.wait(thread["thread_id"], ASSISTANT, input=QUESTION)
    went: Any = await sdk.runs.wait(
        thread["thread_id"],
        ASSISTANT,
        command={"update": {"step": "plan"}, "goto": "generate"},
    )
    assert went["step"] == "generate"
    runs = await sdk.runs.list(thread["thread_id"])
    assert [r["status"] for r in runs] == ["success", "success"]
