"""sessions.db keeps langgraph-checkpoint-sqlite's schema: a checkpoint written
through CheckpointService is read back by stock SqliteSaver."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint, get_checkpoint_metadata
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer


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
