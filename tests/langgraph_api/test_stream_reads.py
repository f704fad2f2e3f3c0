"""A LangGraph stream's follower reads the journal once, at its start, for a whole
run: every later wake comes with the committing writer's news (engine/watch.py
`_Tail`): the claim, the appends, the root checkpoints (decision 440), and the
finish or the park with its events and the turn's end (decision 540). A commit
without news would cost a read per stream, which is what these count. And a run's
start reads its thread's turns (for a run stopped at an interrupt, which it answers)
only on a thread its own insert did not make (decision 570), and makes that thread
in its turn's commit: one write before the hand-off (decision 580), with the run's
record (decision 700), and none after it."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError
from turnkeeper._run_request import default_assistant_id
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.engine import watch
from turnkeeper_server.engine.assistants import Assistants
from turnkeeper_server.engine.handoffs import Handoffs
from turnkeeper_server.engine.threads import Threads
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.store.contract import Tx

# On SQLite and on PostgreSQL (a real cluster the tests start).
pytestmark = pytest.mark.both_backends

QUESTION: dict[str, Any] = {"messages": [{"role": "user", "content": "how fast?"}]}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The cursor of every read a follower made of the journal."""
    made: list[int] = []
    read = watch._Tail._read

    async def counted(self: watch._Tail, cursor: int) -> Any:
        made.append(cursor)
        return await read(self, cursor)

    monkeypatch.setattr(watch._Tail, "_read", counted)
    # No wait without a wake ends in the test's time: every read is a wake's.
    monkeypatch.setattr(watch, "SETTLED_RECHECK_SECONDS", 600.0)
    return made


async def test_a_streamed_run_reads_the_journal_once(
    sdk: LangGraphClient, reads: list[int]
) -> None:
    # One service for the three (a service and its agent host cost seconds to start).
    for kind in ("live", "settled"):
        parts = [
            part.event
            async for part in sdk.runs.stream(
                None,
                "durable-execution",
                input=QUESTION,
                stream_mode=["values", "updates"],
                headers={"X-Turnkeeper-Stream": kind},
            )
        ]
        assert parts.count("updates") == 3 and parts[-1] == "values"
        assert reads == [0], kind
        reads.clear()
    # A run that stops at an interrupt: its park tells its events and its state.
    thread = await sdk.threads.create()
    updates = [
        part.data
        async for part in sdk.runs.stream(
            thread["thread_id"], "approval", input={"topic": "x"}, stream_mode="updates"
        )
        if part.event == "updates"
    ]
    assert any("__interrupt__" in (u or {}) for u in updates)
    assert reads == [0]


@pytest.fixture
def turn_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The thread of every read of a thread's turns (a run's start reads them)."""
    made: list[str] = []
    turns = Threads.turns

    async def counted(
        self: Threads, thread_id: str, *, limit: int, offset: int = 0
    ) -> list[TurnRecord]:
        made.append(thread_id)
        return await turns(self, thread_id, limit=limit, offset=offset)

    monkeypatch.setattr(Threads, "turns", counted)
    return made


async def test_a_run_on_a_thread_its_start_made_reads_no_turns(
    sdk: LangGraphClient, turn_reads: list[str]
) -> None:
    # Thread-less, and if_not_exists=create on an id no thread has: the start's own
    # insert made the thread, which had no turn to look through.
    first = await sdk.runs.create(None, "durable-execution", input=QUESTION)
    named = str(uuid.uuid4())
    second = await sdk.runs.create(
        named, "durable-execution", input=QUESTION, if_not_exists="create"
    )
    assert turn_reads == []
    # The thread exists now (this request did not make it): its turns are read, and
    # the run waits behind the running one as asked.
    third = await sdk.runs.create(
        named,
        "durable-execution",
        input=QUESTION,
        if_not_exists="create",
        multitask_strategy="enqueue",
    )
    assert turn_reads == [named]
    for run in (first, second, third):
        done = await sdk.runs.join(run["thread_id"], run["run_id"])
        assert done["messages"], run


@dataclasses.dataclass
class StartWrites:
    """For each run handed to a replica, the writes (each its own commit: the request
    awaits each) its request made before the hand-off, with its claim or without,
    and those it made after it."""

    before: list[int] = dataclasses.field(default_factory=list)
    after: list[int] = dataclasses.field(default_factory=list)


@pytest.fixture
def start_writes(service: TurnkeeperServer, monkeypatch: pytest.MonkeyPatch) -> StartWrites:
    made: dict[asyncio.Task[Any] | None, int] = {}
    # The request's task of each run handed: which run it is.
    handed_by: dict[asyncio.Task[Any] | None, int] = {}
    counts = StartWrites()
    write = service.db.write

    async def counted(fn: Callable[[Tx], Any]) -> Any:
        task = asyncio.current_task()
        if task in handed_by:
            counts.after[handed_by[task]] += 1
        else:
            made[task] = made.get(task, 0) + 1
        return await write(fn)

    monkeypatch.setattr(service.db, "write", counted)

    def at_handoff() -> None:
        task = asyncio.current_task()
        counts.before.append(made.pop(task, 0))
        handed_by[task] = len(counts.after)
        counts.after.append(0)

    dispatch_later = Handoffs.dispatch_later

    def handed(self: Handoffs, turn: TurnRecord, *, reason: str) -> None:
        at_handoff()
        dispatch_later(self, turn, reason=reason)

    monkeypatch.setattr(Handoffs, "dispatch_later", handed)
    # A start that claimed its turn for a replica hands it with its claim instead
    # (decision 590).
    turns = service.engine.turns
    hand_with_claim_later = turns.hand_with_claim_later

    def handed_with_claim(turn: TurnRecord, claim: str, *, reason: str) -> None:
        at_handoff()
        hand_with_claim_later(turn, claim, reason=reason)

    monkeypatch.setattr(turns, "hand_with_claim_later", handed_with_claim)
    return counts


async def test_a_run_makes_its_thread_in_its_turns_commit(
    sdk: LangGraphClient,
    service: TurnkeeperServer,
    start_writes: StartWrites,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The graphs' default assistants, written once when first asked for.
    await sdk.assistants.search()
    # Thread-less (streamed), and if_not_exists=create on an id no thread has: the
    # thread and the turn in one commit; then a run on that thread, which exists.
    parts = [p.event async for p in sdk.runs.stream(None, "durable-execution", input=QUESTION)]
    assert parts[-1] == "values"
    named = str(uuid.uuid4())
    run = await sdk.runs.create(named, "durable-execution", input=QUESTION, if_not_exists="create")
    made = await sdk.threads.get(named)
    assert (made["metadata"] or {}).get("graph_id") == "durable-execution"
    await sdk.runs.join(named, run["run_id"])
    await sdk.runs.wait(named, "durable-execution", input=QUESTION)
    assert start_writes.before == [1, 1, 1]
    # The run's record rides in that commit too (decision 700): none after it.
    assert start_writes.after == [0, 0, 0]
    records = await service.engine.threads.runs([run["run_id"]])
    assert records[run["run_id"]].metadata.get("graph_id") == "durable-execution"
    # A start refused after its thread was looked for (here: its input over the
    # limit) leaves no thread, as LangGraph's server makes none for a refused run.
    limits = service.operations.turns.limits
    monkeypatch.setattr(
        service.operations.turns, "limits", dataclasses.replace(limits, max_input_bytes=64)
    )
    refused = str(uuid.uuid4())
    with pytest.raises(Exception, match="input"):
        await sdk.runs.create(
            refused, "durable-execution", input={"x": "y" * 100}, if_not_exists="create"
        )
    with pytest.raises(NotFoundError):
        await sdk.threads.get(refused)


async def test_a_run_naming_its_graph_reads_its_assistant_once(
    sdk: LangGraphClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A graph's name is no stored assistant's id (those are UUIDs): it is read as
    # the graph's default assistant, one read (decision 701), where the name was
    # looked up as an id first and missed.
    await sdk.assistants.search()  # the graphs' default assistants, written once
    looked: list[str] = []
    get = Assistants.get

    async def counted(self: Assistants, assistant_id: str) -> Any:
        looked.append(assistant_id)
        return await get(self, assistant_id)

    monkeypatch.setattr(Assistants, "get", counted)
    parts = [p.event async for p in sdk.runs.stream(None, "durable-execution", input=QUESTION)]
    assert parts[-1] == "values"
    assert looked == [default_assistant_id("durable-execution")]
    # An assistant made with an id of its own is still found by it.
    made = await sdk.assistants.create("durable-execution", name="mine")
    looked.clear()
    await sdk.runs.wait(None, made["assistant_id"], input=QUESTION)
    assert looked == [made["assistant_id"]]
