"""A graph step's writes and its checkpoint, sent as one batch on the checkpoint
stream, commit in one transaction in the batch's order: one commit per step. The
stream queues them on the store's writer back to back (decisions 146 and 261), and
when one of them is refused, only that one is left out."""

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


def record_transactions(
    service: TurnkeeperServer, monkeypatch: pytest.MonkeyPatch
) -> list[list[str]]:
    """What each transaction of the store runs from now on, by the operations'
    names: the writer's groups."""
    transactions: list[list[str]] = []

    def name(fn: Any) -> str:
        return str(fn.__qualname__.split(".<locals>")[0])

    writer: Any = service.db._writer  # type: ignore[attr-defined]
    run_group = writer.run_group

    def grouped(group: list[Any]) -> None:
        transactions.append([name(job.fn) for job in group])
        run_group(group)

    monkeypatch.setattr(writer, "run_group", grouped)
    return transactions


@pytest.mark.both_backends
async def test_a_steps_writes_and_checkpoint_commit_in_one_transaction(
    service: TurnkeeperServer,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thread, turn_id = f"g-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
    await start(turns, turn_id=turn_id, thread_id=thread, agent="group-agent")
    transactions = record_transactions(service, monkeypatch)
    batch = Req(batch=step_batch(thread, turn_id))

    [frame] = [answer async for answer in checkpoints.CheckpointStream(iter([batch]))]

    assert [(a.id, a.WhichOneof("result")) for a in frame.batch] == [(1, "writes"), (2, "put")]
    # Both in one transaction (a write of the reaper's may share it).
    ours = [t for t in transactions if "Checkpoints._one" in t]
    assert len(ours) == 1, transactions
    assert ours[0].count("Checkpoints._one") == 2, transactions


@pytest.mark.both_backends
async def test_a_write_refused_at_its_commit_is_left_out_and_the_others_commit(
    backend: str,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    thread, turn_id = f"g-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
    # Written before the turn starts: beside a live turn only its fenced writes go in.
    await checkpoints.PutCheckpoint(
        checkpoints_pb2.PutCheckpointRequest(
            thread_id=thread,
            checkpoint_id="cp-0",
            checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
        )
    )
    await start(turns, turn_id=turn_id, thread_id=thread, agent="group-agent")
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
