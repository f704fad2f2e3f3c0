"""Checkpoints stay portable. sessions.db keeps langgraph-checkpoint-sqlite's schema:
a checkpoint written through CheckpointService is read back by stock SqliteSaver.
On PostgreSQL the service keeps langgraph-checkpoint-postgres's tables: stock
PostgresSaver reads, lists and continues a thread run through RemoteSaver, and the
service serves and continues a thread PostgresSaver wrote."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from grpc import aio
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint, get_checkpoint_metadata
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from turnkeeper.agent.saver import RemoteSaver, durable_config, durable_run_kwargs
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.graphs import build_graph, history
from tests.support.postgres import PostgresCluster
from tests.support.service import ServiceFactory


def typed(serde: JsonPlusSerializer, value: Any) -> cpb.TypedValue:
    type_, data = serde.dumps_typed(value)
    return cpb.TypedValue(type=type_, data=data)


async def test_stock_sqlite_saver_reads_what_the_service_stored(
    service: TurnkeeperServer, checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub
) -> None:
    serde = JsonPlusSerializer()
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {
        "messages": ["hello", {"role": "ai", "content": "hi"}],
        "step": 2,
    }
    config: Any = {"configurable": {"thread_id": "th1", "checkpoint_ns": ""}}
    metadata = get_checkpoint_metadata(config, {"source": "loop", "step": 2, "parents": {}})
    await checkpoints.PutCheckpoint(
        cpb.PutCheckpointRequest(
            thread_id="th1",
            checkpoint_id=checkpoint["id"],
            checkpoint=typed(serde, checkpoint),
            metadata_json=json.dumps(metadata, ensure_ascii=False),
        )
    )
    writes = [("messages", "pending!"), ("__error__", "boom")]
    await checkpoints.PutWrites(
        cpb.PutWritesRequest(
            thread_id="th1",
            checkpoint_id=checkpoint["id"],
            task_id="task-1",
            task_path="~__pregel_pull, node",
            writes=[
                cpb.WriteInput(idx=WRITES_IDX_MAP.get(ch, i), channel=ch, value=typed(serde, v))
                for i, (ch, v) in enumerate(writes)
            ],
        )
    )

    conn = sqlite3.connect(service.settings.sessions_path, check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        got = saver.get_tuple({"configurable": {"thread_id": "th1", "checkpoint_ns": ""}})
        assert got is not None
        assert got.config["configurable"]["checkpoint_id"] == checkpoint["id"]
        assert got.checkpoint["channel_values"] == checkpoint["channel_values"]
        assert got.metadata == metadata
        assert sorted(got.pending_writes or []) == sorted(
            [("task-1", "messages", "pending!"), ("task-1", "__error__", "boom")]
        )
        listed = list(saver.list({"configurable": {"thread_id": "th1"}}, filter={"step": 2}))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == [checkpoint["id"]]
    finally:
        conn.close()


# PostgreSQL, both ways.


@contextmanager
def postgres_saver(url: str) -> Iterator[PostgresSaver]:
    with PostgresSaver.from_conn_string(url) as saver:
        yield saver


def tuples(saver: Any, thread: str) -> list[Any]:
    return list(saver.list({"configurable": {"thread_id": thread}}))


def park(saver: Any, thread: str) -> None:
    parked = build_graph(saver).invoke(
        {"log": ["in"]}, durable_config(thread), **durable_run_kwargs()
    )
    assert "__interrupt__" in parked


def resume(saver: Any, thread: str, answer: str) -> list[str]:
    done = build_graph(saver).invoke(
        Command(resume=answer), durable_config(thread), **durable_run_kwargs()
    )
    return list(done["log"])


async def test_stock_postgres_saver_reads_lists_and_continues_what_the_service_stored(
    make_service: ServiceFactory, postgres_cluster: PostgresCluster
) -> None:
    url = postgres_cluster.new_database()
    service = await make_service(database_url=url)
    thread = "run-through-the-service"
    with RemoteSaver.from_address(service.address) as saver:
        await asyncio.to_thread(park, saver, thread)
        ours = await asyncio.to_thread(tuples, saver, thread)
        our_history = await asyncio.to_thread(history, saver, thread)
    assert len(ours) >= 3

    with postgres_saver(url) as reference:
        # Every checkpoint, its values, metadata, parent and pending writes (the
        # interrupt), root and subgraph namespaces alike.
        assert tuples(reference, thread) == ours
        assert history(reference, thread) == our_history
        # ... and PostgresSaver carries the parked run on to its end.
        assert resume(reference, thread, "yes") == ["in", "first", "answer:yes", "last"]
        finished = history(reference, thread)

    # The service serves what PostgresSaver appended.
    with RemoteSaver.from_address(service.address) as saver:
        assert await asyncio.to_thread(history, saver, thread) == finished


async def test_service_serves_and_continues_a_thread_postgres_saver_wrote(
    make_service: ServiceFactory, postgres_cluster: PostgresCluster
) -> None:
    url = postgres_cluster.new_database()
    thread = "written-by-postgres-saver"
    with postgres_saver(url) as reference:
        # PostgresSaver's own setup first: the service then starts on its tables.
        reference.setup()
        park(reference, thread)
        theirs = tuples(reference, thread)
        their_history = history(reference, thread)

    service = await make_service(database_url=url)
    with RemoteSaver.from_address(service.address) as saver:
        assert await asyncio.to_thread(tuples, saver, thread) == theirs
        assert await asyncio.to_thread(history, saver, thread) == their_history
        # Resume, through the service, the run PostgresSaver parked.
        log = await asyncio.to_thread(resume, saver, thread, "later")
    assert log == ["in", "first", "answer:later", "last"]

    with postgres_saver(url) as reference:
        final = reference.get_tuple({"configurable": {"thread_id": thread}})
        assert final is not None
        assert final.checkpoint["channel_values"]["log"] == log


async def test_postgres_saver_and_the_service_agree_on_application_objects(
    make_service: ServiceFactory, postgres_cluster: PostgresCluster
) -> None:
    # Channel values that are application objects (msgpack extension types): the
    # service moves them between the blob and PostgresSaver's rows without
    # deserialising them, and both sides load the same objects.
    url = postgres_cluster.new_database()
    service = await make_service(database_url=url)
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {
        "messages": [HumanMessage("hi", id="m1"), AIMessage("hello", id="m2")],
        "raw": b"\x00\x01",
        "count": 2,
    }
    checkpoint["channel_versions"] = {"messages": "00002.5", "raw": "00001.1", "count": 3}
    config: Any = {"configurable": {"thread_id": "th", "checkpoint_ns": ""}}
    with RemoteSaver.from_address(service.address) as saver:
        await asyncio.to_thread(saver.put, config, checkpoint, {"step": 1}, {})
        ours = await asyncio.to_thread(saver.get_tuple, config)
    with postgres_saver(url) as reference:
        theirs = reference.get_tuple(config)
    assert ours is not None and theirs is not None
    assert theirs.checkpoint["channel_values"] == checkpoint["channel_values"]
    assert ours.checkpoint == theirs.checkpoint


async def test_a_checkpoint_the_service_cannot_split_round_trips_but_is_opaque_to_postgres_saver(
    make_service: ServiceFactory, postgres_cluster: PostgresCluster
) -> None:
    # What does not round-trip with PostgresSaver (decision 64): a checkpoint
    # serialised other than with LangGraph's msgpack serde is kept whole.
    url = postgres_cluster.new_database()
    service = await make_service(database_url=url)
    blob = b"\x80\x04opaque pickle bytes"
    async with aio.insecure_channel(service.address) as ch:
        stub = checkpoints_pb2_grpc.CheckpointServiceStub(ch)
        await stub.PutCheckpoint(
            cpb.PutCheckpointRequest(
                thread_id="th",
                checkpoint_id="1ef-0001",
                checkpoint=cpb.TypedValue(type="pickle", data=blob),
                metadata_json="{}",
            )
        )
        got = await stub.GetCheckpoint(cpb.GetCheckpointRequest(thread_id="th"))
    assert (got.checkpoint.checkpoint.type, got.checkpoint.checkpoint.data) == ("pickle", blob)
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT channel, type FROM checkpoint_blobs").fetchall()
    assert rows == [("__turnkeeper_checkpoint__", "pickle")]
