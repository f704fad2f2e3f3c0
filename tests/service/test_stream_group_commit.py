"""On SQLite, a checkpoint stream's batch queues its writes on the one writer one
behind the other at once, so a graph step's writes and its checkpoint commit in
one transaction, in the batch's order (decision 146): one commit per step."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import pytest
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.turns import start

pytestmark = pytest.mark.timeout(60)

Req = checkpoints_pb2.CheckpointStreamRequest


async def test_a_steps_writes_and_checkpoint_commit_in_one_transaction(
    service: TurnkeeperServer,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thread, turn_id = f"g-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
    await start(turns, turn_id=turn_id, thread_id=thread, agent="group-agent")
    # What each transaction of the writer ran, by the operations' names.
    groups: list[list[str]] = []
    run_group = service.db._run_group  # type: ignore[attr-defined]

    def recording(conn: Any, group: list[Any]) -> None:
        groups.append([job.fn.__qualname__.split(".<locals>")[0] for job in group])
        run_group(conn, group)

    monkeypatch.setattr(service.db, "_run_group", recording)
    fence = checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=0)
    step = [
        Req(
            id=1,
            writes=checkpoints_pb2.PutWritesRequest(
                thread_id=thread,
                checkpoint_id="cp-0",
                task_id="task-1",
                writes=[
                    checkpoints_pb2.WriteInput(
                        idx=0,
                        channel="steps",
                        value=checkpoints_pb2.TypedValue(type="json", data=b"[1]"),
                    )
                ],
                fence=fence,
            ),
        ),
        Req(
            id=2,
            put=checkpoints_pb2.PutCheckpointRequest(
                thread_id=thread,
                checkpoint_id="cp-1",
                parent_checkpoint_id="cp-0",
                checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
                metadata_json="{}",
                fence=fence,
            ),
        ),
    ]

    [frame] = [answer async for answer in checkpoints.CheckpointStream(iter([Req(batch=step)]))]

    assert [(a.id, a.WhichOneof("result")) for a in frame.batch] == [(1, "writes"), (2, "put")]
    ours = [g for g in groups if "Engine.queue_checkpoint_write" in g]
    # Both in one transaction (a write of the reaper's may share it).
    assert len(ours) == 1, groups
    assert ours[0].count("Engine.queue_checkpoint_write") == 2, groups
