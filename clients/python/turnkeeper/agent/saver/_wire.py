"""RemoteSaver's requests and replies: LangGraph's configs, checkpoints and writes to
CheckpointService messages and back, exactly as SqliteSaver would store and read
them. Shared by the saver's sync and async methods."""

from __future__ import annotations

import builtins
import json
from collections.abc import Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from turnkeeper.agent.saver import _executions as executions
from turnkeeper.agent.saver._identity import turn_identity
from turnkeeper.v1 import checkpoints_pb2


def turn_fence(config: RunnableConfig) -> checkpoints_pb2.TurnFence | None:
    identity = turn_identity(config)
    if identity is None:
        return None
    return checkpoints_pb2.TurnFence(turn_id=identity.turn_id, attempt=identity.attempt)


def get_request(config: RunnableConfig) -> checkpoints_pb2.GetCheckpointRequest:
    configurable = config["configurable"]
    return checkpoints_pb2.GetCheckpointRequest(
        thread_id=str(configurable["thread_id"]),
        checkpoint_ns=configurable.get("checkpoint_ns", ""),
        checkpoint_id=get_checkpoint_id(config) or "",
    )


def list_request(
    config: RunnableConfig | None,
    filter: dict[str, Any] | None,
    before: RunnableConfig | None,
    limit: int | None,
) -> checkpoints_pb2.ListCheckpointsRequest | None:
    """None when SqliteSaver would return nothing whatever is stored (limit=0,
    a ``before`` config without a checkpoint id)."""
    request = checkpoints_pb2.ListCheckpointsRequest()
    if config is not None:
        configurable = config["configurable"]
        request.thread_id = str(configurable["thread_id"])
        checkpoint_ns = configurable.get("checkpoint_ns")
        if checkpoint_ns is not None:
            request.checkpoint_ns = checkpoint_ns
        request.checkpoint_id = get_checkpoint_id(config) or ""
    if filter:
        # SqliteSaver compares values it cannot express in JSON as str(value).
        request.filter_json = json.dumps(filter, ensure_ascii=False, default=str)
    if before is not None:
        before_id = get_checkpoint_id(before)
        if not before_id:
            # SqliteSaver compares `checkpoint_id < NULL`, which matches nothing.
            return None
        request.before_checkpoint_id = before_id
    if limit is not None:
        # SQLite's LIMIT: 0 returns no rows and a negative one means no limit,
        # which is what the proto's 0 means.
        if limit == 0:
            return None
        request.limit = max(limit, 0)
    return request


def put_request(
    serde: SerializerProtocol,
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
) -> tuple[checkpoints_pb2.PutCheckpointRequest, RunnableConfig]:
    configurable = config["configurable"]
    thread_id = configurable["thread_id"]
    checkpoint_ns = configurable.get("checkpoint_ns", "")
    type_, data = serde.dumps_typed(checkpoint)
    # Exactly SqliteSaver's column: its .encode("utf-8", "ignore") drops lone
    # surrogates, which a proto string could not carry anyway.
    metadata_json = (
        json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False)
        .encode("utf-8", "ignore")
        .decode("utf-8")
    )
    request = checkpoints_pb2.PutCheckpointRequest(
        thread_id=str(thread_id),
        checkpoint_ns=checkpoint_ns,
        checkpoint_id=checkpoint["id"],
        parent_checkpoint_id=configurable.get("checkpoint_id") or "",
        checkpoint=checkpoints_pb2.TypedValue(type=type_, data=data),
        metadata_json=metadata_json,
    )
    if (fence := turn_fence(config)) is not None:
        request.fence.CopyFrom(fence)
    stored: RunnableConfig = {
        "configurable": {
            "thread_id": thread_id,
            "checkpoint_ns": checkpoint_ns,
            "checkpoint_id": checkpoint["id"],
        }
    }
    return request, stored


def writes_request(
    serde: SerializerProtocol,
    config: RunnableConfig,
    writes: Sequence[tuple[str, Any]],
    task_id: str,
    task_path: str,
) -> checkpoints_pb2.PutWritesRequest:
    configurable = config["configurable"]
    request = checkpoints_pb2.PutWritesRequest(
        thread_id=str(configurable["thread_id"]),
        checkpoint_ns=str(configurable.get("checkpoint_ns", "")),
        checkpoint_id=str(configurable["checkpoint_id"]),
        task_id=task_id,
        task_path=task_path,
        # SqliteSaver: INSERT OR REPLACE when every channel is a special one
        # (an error, an interrupt ... supersedes the previous one), otherwise
        # INSERT OR IGNORE (a task's writes are stored once).
        replace=all(channel in WRITES_IDX_MAP for channel, _ in writes),
    )
    for idx, (channel, value) in enumerate(writes):
        type_, data = serde.dumps_typed(value)
        request.writes.append(
            checkpoints_pb2.WriteInput(
                idx=WRITES_IDX_MAP.get(channel, idx),
                channel=channel,
                value=checkpoints_pb2.TypedValue(type=type_, data=data),
            )
        )
    identity = turn_identity(config)
    if identity is not None:
        request.fence.turn_id, request.fence.attempt = identity
        # The task's writes say which effects the execution that made them made, so
        # the service supersedes the task's others (turnkeeper.agent.saver._executions).
        request.settle_effects = True
        request.effect_keys.extend(executions.take_made(identity, task_id))
    return request


def to_tuple(
    serde: SerializerProtocol,
    stored: checkpoints_pb2.CheckpointTuple,
    config: RunnableConfig | None,
) -> CheckpointTuple:
    """The CheckpointTuple SqliteSaver would build from the same rows. ``config``:
    the caller's config when it named the checkpoint (get_tuple returns it as
    given), else None to build it from the stored ref."""
    ref = stored.ref
    if config is None:
        config = {
            "configurable": {
                "thread_id": ref.thread_id,
                "checkpoint_ns": ref.checkpoint_ns,
                "checkpoint_id": ref.checkpoint_id,
            }
        }
    parent_config: RunnableConfig | None = None
    if stored.parent_checkpoint_id:
        parent_config = {
            "configurable": {
                "thread_id": ref.thread_id,
                "checkpoint_ns": ref.checkpoint_ns,
                "checkpoint_id": stored.parent_checkpoint_id,
            }
        }
    # BaseCheckpointSaver's contract: pending writes in writes_sort_key order,
    # whatever order they came over the wire in.
    writes = sorted(
        stored.pending_writes, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx)
    )
    pending: builtins.list[PendingWrite] = [
        (w.task_id, w.channel, serde.loads_typed((w.value.type, w.value.data))) for w in writes
    ]
    return CheckpointTuple(
        config=config,
        checkpoint=serde.loads_typed((stored.checkpoint.type, stored.checkpoint.data)),
        metadata=cast(
            CheckpointMetadata, json.loads(stored.metadata_json) if stored.metadata_json else {}
        ),
        parent_config=parent_config,
        pending_writes=pending,
    )


def found(
    serde: SerializerProtocol,
    config: RunnableConfig,
    response: checkpoints_pb2.GetCheckpointResponse,
) -> CheckpointTuple | None:
    if not response.found:
        return None
    # Like SqliteSaver: a config that named its checkpoint is returned as given.
    return to_tuple(serde, response.checkpoint, config if get_checkpoint_id(config) else None)
