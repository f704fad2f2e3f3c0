"""CheckpointStream on the wire: each message answered with its id after its commit,
a refused message answered alone while the stream goes on, events and a checkpoint
on one stream committed in order (the checkpoint's boundary counts the events sent
before it), and a stale attempt ending the stream with ABORTED so that nothing sent
after it on the stream is stored."""

from __future__ import annotations

from uuid import uuid4

import grpc
import pytest
from google.protobuf import struct_pb2
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc

pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends]

Req = checkpoints_pb2.CheckpointStreamRequest


async def _start(turns: turns_pb2_grpc.TurnServiceAsyncStub, thread: str, turn_id: str) -> None:
    await turns.StartTurn(
        turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=thread,
            agent="stream-agent",
            input=struct_pb2.Value(string_value="hi"),
            replica=f"replica-{turn_id}",
            incarnation="inc-1",
        )
    )


def _put(thread: str, turn_id: str, attempt: int, checkpoint_id: str) -> Req:
    return Req(
        put=checkpoints_pb2.PutCheckpointRequest(
            thread_id=thread,
            checkpoint_id=checkpoint_id,
            checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
            fence=checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=attempt),
        )
    )


async def test_stream_answers_in_order_and_a_refusal_does_not_end_it(
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    thread, turn_id = f"s-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
    await _start(turns, thread, turn_id)
    events = [
        turns_pb2.EventInput(seq=seq, type="token", data_json=f'{{"n": {seq}}}')
        for seq in (1, 2, 3)
    ]
    append = Req(append=turns_pb2.AppendEventsRequest(turn_id=turn_id, attempt=0, events=events))
    bad = _put(thread, turn_id, 0, "")
    get = Req(get=checkpoints_pb2.GetCheckpointRequest(thread_id=thread))
    requests = [append, _put(thread, turn_id, 0, "cp-1"), bad, get, Req()]
    for n, request in enumerate(requests, start=1):
        request.id = n * 10

    call = checkpoints.CheckpointStream(iter(requests))
    answers = [answer async for answer in call]

    assert [a.id for a in answers] == [10, 20, 30, 40, 50]
    assert answers[0].append.last_seq == 3
    assert answers[1].put.ref.checkpoint_id == "cp-1"
    assert answers[2].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "checkpoint_id" in answers[2].error.message
    assert answers[3].get.found and answers[3].get.checkpoint.ref.checkpoint_id == "cp-1"
    assert answers[4].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "get, put, writes or append" in answers[4].error.message
    # The events sent before the checkpoint are its boundary: a re-drive rewinds to 3.
    redriven = await turns.Redrive(
        turns_pb2.RedriveRequest(
            agent="stream-agent", replica=f"replica-{turn_id}", incarnation="inc-2"
        )
    )
    [mine] = [r for r in redriven.turns if r.turn.turn_id == turn_id]
    assert (mine.checkpoint_id, mine.rewind_seq) == ("cp-1", 3)


async def test_a_stale_attempt_ends_the_stream_with_aborted(
    channel: aio.Channel,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    thread, turn_id = f"s-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
    await _start(turns, thread, turn_id)
    await turns.Redrive(
        turns_pb2.RedriveRequest(
            agent="stream-agent", replica=f"replica-{turn_id}", incarnation="inc-2"
        )
    )
    # Attempt 0 was re-driven away; attempt 1's put comes after it on the stream.
    stale, after = _put(thread, turn_id, 0, "zombie"), _put(thread, turn_id, 1, "after")
    stale.id, after.id = 1, 2

    call = checkpoints.CheckpointStream(iter([stale, after]))
    with pytest.raises(aio.AioRpcError) as info:
        async for _ in call:
            pass
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert "attempt" in (info.value.details() or "")

    for checkpoint_id in ("zombie", "after"):
        found = await checkpoints.GetCheckpoint(
            checkpoints_pb2.GetCheckpointRequest(thread_id=thread, checkpoint_id=checkpoint_id)
        )
        assert not found.found, checkpoint_id
