"""RemoteSaver against a real service: parity with stock SqliteSaver (same calls,
same answers), portability of sessions.db both ways, fencing, and use from
several event loops.

The service runs on the test's event loop, so every blocking call (RemoteSaver's
sync methods, a graph's ``invoke``) goes through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from google.protobuf import struct_pb2
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    Checkpoint,
    CheckpointTuple,
    empty_checkpoint,
)
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from turnkeeper import errors
from turnkeeper.agent.saver import RemoteSaver, durable_config, durable_run_kwargs
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.graphs import build_graph, history
from tests.support.nats import NatsServer
from tests.support.service import unrenewed

# The turns here are started in a replica's name and written by the test's own graph
# runs, with no agent to renew their lease (decision 690).
pytestmark = [pytest.mark.timeout(120), pytest.mark.unrenewed]


def service_address(service: TurnkeeperServer) -> str:
    return service.address


def run_graph_sync(checkpointer: BaseCheckpointSaver[Any], config: RunnableConfig) -> None:
    graph = build_graph(checkpointer)
    first = graph.invoke({"log": ["in"]}, config, **durable_run_kwargs())
    assert "__interrupt__" in first
    done = graph.invoke(Command(resume="yes"), config, **durable_run_kwargs())
    assert done["log"] == ["in", "first", "answer:yes", "last"]


async def run_graph_async(checkpointer: BaseCheckpointSaver[Any], config: RunnableConfig) -> None:
    graph = build_graph(checkpointer)
    first = await graph.ainvoke({"log": ["in"]}, config, **durable_run_kwargs())
    assert "__interrupt__" in first
    done = await graph.ainvoke(Command(resume="yes"), config, **durable_run_kwargs())
    assert done["log"] == ["in", "first", "answer:yes", "last"]


@contextmanager
def sqlite_saver(path: Path | str) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(str(path)) as saver:
        yield saver


# Parity of the sync API, call by call, with SqliteSaver.


def _checkpoint(checkpoint_id: str, value: Any) -> Checkpoint:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = checkpoint_id
    checkpoint["ts"] = "2025-01-01T00:00:00+00:00"
    checkpoint["channel_values"] = {"log": value}
    checkpoint["channel_versions"] = {"log": "00000000000000000000000000000001.0.5"}
    return checkpoint


def parity_script(
    saver: BaseCheckpointSaver[Any], prefix: str, ids: list[str]
) -> list[tuple[str, Any]]:
    """Calls whose answers must be identical on any saver given the same thread
    prefix and checkpoint ids (ascending); returns (label, answer) pairs."""
    out: list[tuple[str, Any]] = []
    a, b = f"{prefix}-a", f"{prefix}-b"
    suite = {"suite": prefix}

    def cfg(thread: str, ns: str = "", checkpoint_id: str | None = None) -> RunnableConfig:
        configurable: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ns}
        if checkpoint_id is not None:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    md: list[Any] = [
        {"source": "input", "step": -1, "parents": {}, **suite, "flag": True, "none": None},
        {"source": "loop", "step": 0, "parents": {}, **suite, "flag": False, "nested": {"k": 1}},
        {"source": "loop", "step": 1, "parents": {}, **suite, "text": "zoë ✓"},
        {"source": "loop", "step": 0, "parents": {"": ids[1]}, **suite},
        {"source": "update", "step": 5, "parents": {}, **suite, "score": 1.5},
    ]
    extra = {"configurable": {"user": "u-1", "attempt": 0, "__private": "x"}}
    out.append(("put0", saver.put(cfg(a), _checkpoint(ids[0], ["x"]), md[0], {})))
    out.append(
        ("put1", saver.put(cfg(a, checkpoint_id=ids[0]), _checkpoint(ids[1], []), md[1], {}))
    )
    merged = cfg(a, checkpoint_id=ids[1])
    merged["configurable"].update(extra["configurable"])
    out.append(("put2", saver.put(merged, _checkpoint(ids[2], ["é"]), md[2], {})))
    out.append(("put3", saver.put(cfg(a, "review:t1"), _checkpoint(ids[3], [1]), md[3], {})))
    out.append(("put4", saver.put(cfg(b), _checkpoint(ids[4], {"d": 1}), md[4], {})))

    # Writes: several tasks and paths (sorted by writes_sort_key on read), a repeated
    # regular write (ignored), special writes (replaced).
    saver.put_writes(cfg(a, checkpoint_id=ids[2]), [("log", "t2-0"), ("x", "t2-1")], "t2", "~b")
    saver.put_writes(cfg(a, checkpoint_id=ids[2]), [("log", "t1-0")], "t1", "~a")
    saver.put_writes(cfg(a, checkpoint_id=ids[2]), [("log", "t1-again")], "t1", "~a")
    saver.put_writes(cfg(a, checkpoint_id=ids[2]), [(ERROR, "boom")], "t3", "~c")
    saver.put_writes(cfg(a, checkpoint_id=ids[2]), [(ERROR, "boom2"), (INTERRUPT, {"q": 1})], "t3")
    saver.put_writes(cfg(a, "review:t1", ids[3]), [("log", "child")], "t9", "~z")

    def tuples(items: Iterator[CheckpointTuple]) -> list[CheckpointTuple]:
        return list(items)

    out.append(("get latest a", saver.get_tuple({"configurable": {"thread_id": a}})))
    out.append(("get a/ids1", saver.get_tuple(cfg(a, checkpoint_id=ids[1]))))
    with_metadata: RunnableConfig = {
        "configurable": dict(merged["configurable"]),
        "metadata": {"m": 1},
    }
    out.append(("get a/ids2 extra", saver.get_tuple(with_metadata)))
    out.append(("get child", saver.get_tuple(cfg(a, "review:t1"))))
    out.append(("get missing id", saver.get_tuple(cfg(a, checkpoint_id=str(uuid4())))))
    out.append(("get missing thread", saver.get_tuple(cfg(f"{prefix}-none"))))
    out.append(("list a", tuples(saver.list(cfg(a)))))
    out.append(("list a any ns", tuples(saver.list({"configurable": {"thread_id": a}}))))
    out.append(("list a child", tuples(saver.list(cfg(a, "review:t1")))))
    out.append(("list a id", tuples(saver.list(cfg(a, checkpoint_id=ids[1])))))
    out.append(("list suite", tuples(saver.list(None, filter=suite))))
    filters: list[tuple[str, dict[str, Any]]] = [
        ("source", {"source": "loop"}),
        ("step", {"step": 0}),
        ("bool", {"flag": True}),
        ("false", {"flag": False}),
        ("none", {"none": None}),
        ("nested", {"nested": {"k": 1}}),
        ("unicode", {"text": "zoë ✓"}),
        ("float", {"score": 1.5}),
        ("merged config", {"user": "u-1", "attempt": 0}),
        ("two keys", {"source": "loop", "step": 1}),
        ("no match", {"source": "fork"}),
    ]
    for label, flt in filters:
        out.append((f"filter {label}", tuples(saver.list(None, filter={**suite, **flt}))))
    before: RunnableConfig = {"configurable": {"checkpoint_id": ids[2]}}
    out.append(("before", tuples(saver.list(cfg(a), before=before))))
    for limit in (0, 1, 2, -1):
        out.append((f"limit {limit}", tuples(saver.list(cfg(a), limit=limit))))
    out.append(("before+limit", tuples(saver.list(cfg(a), before=before, limit=1))))
    out.append(("before without id", tuples(saver.list(cfg(a), before={"configurable": {}}))))
    for bad_key in ("bad key;", "clé"):
        try:
            tuples(saver.list(cfg(a), filter={bad_key: 1}))
            out.append((f"filter key {bad_key!r}", "no error"))
        except ValueError:
            out.append((f"filter key {bad_key!r}", "ValueError"))

    saver.delete_thread(a)
    out.append(("deleted a", tuples(saver.list({"configurable": {"thread_id": a}}))))
    out.append(("deleted a get", saver.get_tuple(cfg(a))))
    out.append(("b survives", tuples(saver.list(cfg(b)))))
    return out


def assert_same_answers(ours: list[tuple[str, Any]], theirs: list[tuple[str, Any]]) -> None:
    assert [label for label, _ in ours] == [label for label, _ in theirs]
    for (label, mine), (_, reference) in zip(ours, theirs, strict=True):
        assert mine == reference, f"{label}: RemoteSaver differs from SqliteSaver"


async def test_sync_api_answers_like_sqlite_saver(
    service: TurnkeeperServer, tmp_path: Path
) -> None:
    prefix = f"parity-{uuid4().hex[:8]}"
    ids = [str(uuid6(clock_seq=-1)) for _ in range(5)]
    with sqlite_saver(tmp_path / "reference.db") as reference:
        theirs = parity_script(reference, prefix, ids)
    with RemoteSaver.from_address(service_address(service)) as saver:
        ours = await asyncio.to_thread(parity_script, saver, prefix, ids)
    assert_same_answers(ours, theirs)


@pytest.mark.both_backends
async def test_graph_runs_like_on_sqlite_saver(service: TurnkeeperServer, tmp_path: Path) -> None:
    thread = f"graph-{uuid4().hex[:8]}"
    with sqlite_saver(tmp_path / "reference.db") as reference:
        run_graph_sync(reference, durable_config(thread))
        expected = history(reference, thread)
    assert len(expected) >= 5

    with RemoteSaver.from_address(service_address(service)) as saver:
        await asyncio.to_thread(run_graph_sync, saver, durable_config(thread))
        assert await asyncio.to_thread(history, saver, thread) == expected

    async with RemoteSaver(service_address(service)) as saver:
        async_thread = f"{thread}-async"
        await run_graph_async(saver, durable_config(async_thread))
        assert await asyncio.to_thread(history, saver, async_thread) == expected
        states = [s async for s in build_graph(saver).aget_state_history(durable_config(thread))]
        assert len(states) == len(expected)


# Portability of sessions.db.


def _tuples_of(saver: BaseCheckpointSaver[Any], thread: str) -> list[CheckpointTuple]:
    return list(saver.list({"configurable": {"thread_id": thread}}))


async def test_sqlite_saver_reads_what_the_service_stored(service: TurnkeeperServer) -> None:
    thread, turn_id = f"port-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=service_address(service))
    async with AsyncTurnkeeperClient(options) as client:
        await _start_turn(client, thread, turn_id)
    with RemoteSaver.from_address(options=options) as saver:
        await asyncio.to_thread(run_graph_sync, saver, durable_config(thread, turn_id, 0))
        ours = await asyncio.to_thread(_tuples_of, saver, thread)
        our_history = await asyncio.to_thread(history, saver, thread)
    # Stock SqliteSaver on the live file (WAL: a reader beside the service).
    with sqlite_saver(service.settings.sessions_path) as reference:
        theirs = _tuples_of(reference, thread)
        their_history = history(reference, thread)
        latest = reference.get_tuple({"configurable": {"thread_id": thread}})
    assert theirs == ours
    assert their_history == our_history
    assert latest is not None
    assert latest.checkpoint["channel_values"]["log"] == ["in", "first", "answer:yes", "last"]
    assert dict(latest.metadata)["turn_id"] == turn_id


async def test_service_serves_a_file_sqlite_saver_wrote(
    make_service: Callable[..., Awaitable[TurnkeeperServer]], tmp_path: Path
) -> None:
    thread = "written-by-sqlite-saver"
    with sqlite_saver(tmp_path / "sessions.db") as reference:
        graph = build_graph(reference)
        parked = graph.invoke({"log": ["in"]}, durable_config(thread), **durable_run_kwargs())
        assert "__interrupt__" in parked
        theirs = _tuples_of(reference, thread)
        their_history = history(reference, thread)

    # conftest's make_service keeps sessions.db in tmp_path: the file just written.
    service = await make_service()
    assert service.settings.sessions_path == tmp_path / "sessions.db"
    with RemoteSaver.from_address(service_address(service)) as saver:
        assert await asyncio.to_thread(_tuples_of, saver, thread) == theirs
        assert await asyncio.to_thread(history, saver, thread) == their_history

    # Resume, through the service, the turn SqliteSaver parked.
    async with RemoteSaver(service_address(service)) as saver:
        done = await build_graph(saver).ainvoke(
            Command(resume="later"), durable_config(thread), **durable_run_kwargs()
        )
        assert done["log"] == ["in", "first", "answer:later", "last"]
        ours = [t async for t in saver.alist({"configurable": {"thread_id": thread}})]
    await service.stop(0)

    with sqlite_saver(tmp_path / "sessions.db") as reference:
        assert _tuples_of(reference, thread) == ours
        state = build_graph(reference).get_state(durable_config(thread))
        assert state.values["log"] == ["in", "first", "answer:later", "last"]
        assert state.next == ()


def test_sessions_db_schema_is_sqlite_savers(tmp_path: Path) -> None:
    """Guard for the portability tests: the reference schema they rely on."""
    with sqlite_saver(tmp_path / "s.db") as reference:
        reference.setup()
    with closing(sqlite3.connect(tmp_path / "s.db")) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert {"checkpoints", "writes"} <= tables


# Fencing.


def fenced(
    thread: str, turn_id: str, attempt: int, checkpoint_id: str | None = None
) -> RunnableConfig:
    config = durable_config(thread, turn_id, attempt)
    config["configurable"]["checkpoint_ns"] = ""
    if checkpoint_id is not None:
        config["configurable"]["checkpoint_id"] = checkpoint_id
    return config


async def _start_turn(
    client: AsyncTurnkeeperClient, thread: str, turn_id: str, incarnation: str = "inc-1"
) -> turns_pb2.Turn:
    response = await client.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=thread,
            agent="fence-agent",
            input=struct_pb2.Value(string_value="hello"),
            replica=f"replica-{turn_id}",
            incarnation=incarnation,
        )
    )
    return response.turn


async def _redrive(client: AsyncTurnkeeperClient, turn_id: str) -> turns_pb2.RedrivenTurn:
    """Startup form: the executor restarted under a new incarnation."""
    response = await client.redrive(
        turns_pb2.RedriveRequest(
            agent="fence-agent", replica=f"replica-{turn_id}", incarnation="inc-2"
        )
    )
    [redriven] = [r for r in response.turns if r.turn.turn_id == turn_id]
    return redriven


def _events(first: int, last: int) -> list[turns_pb2.EventInput]:
    return [
        turns_pb2.EventInput(seq=seq, type="token", data_json=f'{{"n": {seq}}}')
        for seq in range(first, last + 1)
    ]


@pytest.mark.both_backends
async def test_writes_of_a_redriven_attempt_are_fenced(service: TurnkeeperServer) -> None:
    thread, turn_id = f"fence-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=service_address(service))
    async with AsyncTurnkeeperClient(options) as client, RemoteSaver(options=options) as saver:
        turn = await _start_turn(client, thread, turn_id)
        assert turn.attempts == 0

        first = empty_checkpoint()
        stored = await saver.aput(
            fenced(thread, turn_id, 0), first, {"source": "input", "step": -1}, {}
        )
        await saver.aput_writes(fenced(thread, turn_id, 0, first["id"]), [("log", "a")], "task-1")

        # A turn the journal never saw, and an attempt the turn never had: refused.
        with pytest.raises(errors.TurnNotFound):
            await saver.aput(fenced(thread, "no-such-turn", 0), empty_checkpoint(), {}, {})
        with pytest.raises(errors.StaleAttempt):
            await saver.aput(fenced(thread, turn_id, 1), empty_checkpoint(), {}, {})

        redriven = await _redrive(client, turn_id)
        assert redriven.turn.attempts == 1

        # The zombie (attempt 0) can write nothing more, on either path.
        zombie = fenced(thread, turn_id, 0, first["id"])
        with pytest.raises(errors.StaleAttempt):
            await saver.aput(zombie, empty_checkpoint(), {}, {})
        with pytest.raises(errors.StaleAttempt):
            await saver.aput_writes(zombie, [("log", "late")], "task-2")
        with pytest.raises(errors.StaleAttempt):
            await asyncio.to_thread(saver.put, zombie, empty_checkpoint(), {}, {})
        with pytest.raises(errors.StaleAttempt):
            await asyncio.to_thread(saver.put_writes, zombie, [("log", "late")], "task-2")

        # The new attempt writes.
        current = fenced(thread, turn_id, 1, first["id"])
        await saver.aput(current, empty_checkpoint(), {"source": "loop", "step": 0}, {})

        latest = await saver.aget_tuple({"configurable": {"thread_id": thread}})
        assert latest is not None
        assert dict(latest.metadata)["attempt"] == 1
        writes = await saver.aget_tuple(stored)
        assert writes is not None
        assert [w[2] for w in writes.pending_writes or []] == ["a"]


@pytest.mark.both_backends
async def test_checkpoint_records_the_event_boundary(service: TurnkeeperServer) -> None:
    thread, turn_id = f"bound-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=service_address(service))
    async with AsyncTurnkeeperClient(options) as client, RemoteSaver(options=options) as saver:
        await _start_turn(client, thread, turn_id)
        await client.append_events(
            turns_pb2.AppendEventsRequest(turn_id=turn_id, attempt=0, events=_events(1, 3))
        )
        checkpoint = empty_checkpoint()
        await saver.aput(fenced(thread, turn_id, 0), checkpoint, {"source": "loop", "step": 0}, {})
        await client.append_events(
            turns_pb2.AppendEventsRequest(turn_id=turn_id, attempt=0, events=_events(4, 5))
        )

        redriven = await _redrive(client, turn_id)
        assert redriven.checkpoint_id == checkpoint["id"]
        assert redriven.rewind_seq == 3
        events = await client.list_events(turns_pb2.ListEventsRequest(turn_id=turn_id))
        assert [e.seq for e in events.events] == [1, 2, 3]
        assert events.last_seq == 3


@pytest.mark.both_backends
async def test_a_zombie_graph_run_fails_with_stale_attempt(service: TurnkeeperServer) -> None:
    thread, turn_id = f"zombie-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=service_address(service))
    async with AsyncTurnkeeperClient(options) as client, RemoteSaver(options=options) as saver:
        await _start_turn(client, thread, turn_id)
        graph = build_graph(saver)
        parked = await graph.ainvoke(
            {"log": ["in"]}, durable_config(thread, turn_id, 0), **durable_run_kwargs()
        )
        assert "__interrupt__" in parked
        await _redrive(client, turn_id)
        with pytest.raises(errors.StaleAttempt):
            await graph.ainvoke(
                Command(resume="zombie"), durable_config(thread, turn_id, 0), **durable_run_kwargs()
            )
        state = await graph.aget_state(durable_config(thread))
        assert state.next == ("review",)
        done = await graph.ainvoke(
            Command(resume="new"), durable_config(thread, turn_id, 1), **durable_run_kwargs()
        )
        assert done["log"] == ["in", "first", "answer:new", "last"]


@pytest.mark.both_backends
async def test_park_resume_claim_keeps_the_attempt_and_fences_by_state(
    make_service: Callable[..., Awaitable[TurnkeeperServer]], nats_server: NatsServer
) -> None:
    """The detached-turn cycle as a bridge drives it: writes are accepted while the
    turn RUNNING under its attempt, refused (WrongState) while it is PARKED or after
    it is DONE, and accepted again after ResumeDetached + ClaimTurn."""
    # A long claim window too: the reaper must not offer the resumed turn again
    # before this test claims it.
    service = await make_service(nats_url=nats_server.url, **unrenewed(claims=True))
    thread, turn_id = f"park-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=service_address(service))
    async with AsyncTurnkeeperClient(options) as client, RemoteSaver(options=options) as saver:
        await _start_turn(client, thread, turn_id)
        graph = build_graph(saver)
        parked = await graph.ainvoke(
            {"log": ["in"]}, durable_config(thread, turn_id, 0), **durable_run_kwargs()
        )
        [pending] = parked["__interrupt__"]
        value = struct_pb2.Value()
        value.struct_value.update(pending.value)
        await client.park_turn(
            turns_pb2.ParkTurnRequest(turn_id=turn_id, attempt=0, interrupt=value)
        )
        with pytest.raises(errors.WrongState, match="PARKED"):
            await saver.aput(fenced(thread, turn_id, 0), empty_checkpoint(), {}, {})

        resumed = await client.resume_detached(
            turns_pb2.ResumeDetachedRequest(
                turn_id=turn_id, resume=struct_pb2.Value(string_value="ok")
            )
        )
        # Nothing was lost on the park: same attempt, no rewind.
        assert resumed.turn.attempts == 0
        assert resumed.turn.rewinds == 0
        claimed = await client.claim_turn(
            turns_pb2.ClaimTurnRequest(
                turn_id=turn_id, attempt=0, replica="replica-2", incarnation="inc-9"
            )
        )
        latest = await saver.aget_tuple(durable_config(thread))
        assert latest is not None
        assert claimed.checkpoint_id == latest.config["configurable"]["checkpoint_id"]

        done = await graph.ainvoke(
            Command(resume="ok"), durable_config(thread, turn_id, 0), **durable_run_kwargs()
        )
        assert done["log"] == ["in", "first", "answer:ok", "last"]
        await client.finish_turn(
            turns_pb2.FinishTurnRequest(turn_id=turn_id, attempt=0, outcome=turns_pb2.OUTCOME_DONE)
        )
        with pytest.raises(errors.WrongState, match="DONE"):
            await saver.aput(fenced(thread, turn_id, 0), empty_checkpoint(), {}, {})
        # Reading the thread is not tied to the turn's state.
        assert (await saver.aget_tuple(durable_config(thread))) is not None


# Event loops.


@pytest.mark.both_backends
async def test_one_saver_serves_several_event_loops(service: TurnkeeperServer) -> None:
    saver = RemoteSaver(service_address(service))
    threads = [f"loops-{i}-{uuid4().hex[:6]}" for i in range(3)]

    def run_in_new_loop(thread: str) -> list[str]:
        async def go() -> list[str]:
            await run_graph_async(saver, durable_config(thread))
            latest = await saver.aget_tuple(durable_config(thread))
            assert latest is not None
            return list(latest.checkpoint["channel_values"]["log"])

        return asyncio.run(go())

    results = await asyncio.gather(*(asyncio.to_thread(run_in_new_loop, t) for t in threads))
    assert results == [["in", "first", "answer:yes", "last"]] * 3
    # And on this loop, beside the service.
    await run_graph_async(saver, durable_config(f"{threads[0]}-here"))
    # close() from a coroutine closes this loop's channel in a task; then aclose()
    # has nothing left to do: both are safe after the other.
    saver.close()
    await saver.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        await saver.aget_tuple(durable_config(threads[0]))
