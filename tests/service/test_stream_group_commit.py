"""A graph step's writes and its checkpoint, sent as one batch on the checkpoint
stream, commit in one transaction in the batch's order: one commit per step. On
SQLite the stream queues them on the one writer back to back (decision 146); on
PostgreSQL it runs them in one transaction (decision 149), and when one of them is
refused there, each runs on its own so that only that one is left out."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import grpc
import pytest
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.turns import start

pytestmark = pytest.mark.timeout(60)

Req = checkpoints_pb2.CheckpointStreamRequest


def step_batch(thread: str, turn_id: str, put_thread: str | None = None) -> list[Req]:
    """A step: one task's writes to cp-0, then checkpoint cp-1 (on `put_thread`)."""
    fence = checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=0)
    return [
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
                thread_id=put_thread or thread,
                checkpoint_id="cp-1",
                parent_checkpoint_id="cp-0",
                checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
                metadata_json="{}",
                fence=fence,
            ),
        ),
    ]


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
    step = step_batch(thread, turn_id)

    [frame] = [answer async for answer in checkpoints.CheckpointStream(iter([Req(batch=step)]))]

    assert [(a.id, a.WhichOneof("result")) for a in frame.batch] == [(1, "writes"), (2, "put")]
    ours = [g for g in groups if "Engine.queue_checkpoint_write" in g]
    # Both in one transaction (a write of the reaper's may share it).
    assert len(ours) == 1, groups
    assert ours[0].count("Engine.queue_checkpoint_write") == 2, groups


@pytest.mark.postgres_only
async def test_on_postgresql_a_steps_writes_and_checkpoint_commit_in_one_transaction(
    backend: str,
    service: TurnkeeperServer,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thread, turn_id = f"g-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
    await start(turns, turn_id=turn_id, thread_id=thread, agent="group-agent")
    # The transactions the store ran, by the operations' names.
    transactions: list[str] = []
    write = service.db.write

    async def recording(fn: Any) -> Any:
        transactions.append(fn.__qualname__)
        return await write(fn)

    monkeypatch.setattr(service.db, "write", recording)
    batch = Req(batch=step_batch(thread, turn_id))
    [frame] = [answer async for answer in checkpoints.CheckpointStream(iter([batch]))]

    assert [(a.id, a.WhichOneof("result")) for a in frame.batch] == [(1, "writes"), (2, "put")]
    ours = [name for name in transactions if name.startswith("Engine.")]
    assert ours == ["Engine.write_checkpoints.<locals>.together"], transactions


@pytest.mark.both_backends
async def test_a_write_refused_at_its_commit_is_left_out_and_the_others_commit(
    backend: str,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    thread, turn_id = f"g-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
    await start(turns, turn_id=turn_id, thread_id=thread, agent="group-agent")
    await checkpoints.PutCheckpoint(
        checkpoints_pb2.PutCheckpointRequest(
            thread_id=thread,
            checkpoint_id="cp-0",
            checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
        )
    )
    # The checkpoint names the turn's fence on another thread: valid as a message,
    # refused only inside its transaction, when the turn's row is read.
    batch = Req(batch=step_batch(thread, turn_id, put_thread=f"{thread}-other"))
    [frame] = [answer async for answer in checkpoints.CheckpointStream(iter([batch]))]

    writes, put = frame.batch
    assert (writes.id, writes.WhichOneof("result")) == (1, "writes")
    assert (put.id, put.WhichOneof("result")) == (2, "error")
    assert put.error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
    assert "runs on thread" in put.error.message
    found = await checkpoints.GetCheckpoint(
        checkpoints_pb2.GetCheckpointRequest(thread_id=thread, checkpoint_id="cp-0")
    )
    assert [w.task_id for w in found.checkpoint.pending_writes] == ["task-1"]
    missing = await checkpoints.GetCheckpoint(
        checkpoints_pb2.GetCheckpointRequest(thread_id=f"{thread}-other")
    )
    assert not missing.found
