"""A shared CheckpointStream: several runs' messages on one stream, a frame carrying
a step of several runs, and a stale attempt's message answered ABORTED on its own
while the other runs on the stream go on (decision 155)."""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import uuid4

import grpc
import pytest
from grpc import aio
from langgraph.types import Command
from turnkeeper.agent.saver import RemoteSaver, durable_config
from turnkeeper.agent.saver._stream import AsyncRunStream
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import InvalidArgument, StaleAttempt
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.graphs import build_graph, history
from tests.support.streams import (
    Req,
    append_message,
    keep_frames,
    put_message,
    redrive_turn,
    start_turn,
    stored_checkpoints,
)

# The turns here are a replica's, written by the test itself: no agent renews their lease.
pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends, pytest.mark.unrenewed]

ABORTED = grpc.StatusCode.ABORTED.value[0]


async def _two_turns(turns: turns_pb2_grpc.TurnServiceAsyncStub) -> list[tuple[str, str]]:
    """Two RUNNING turns (attempt 0), each on a thread of its own: (thread, turn_id)."""
    runs = [(f"s-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}") for _ in range(2)]
    for thread, turn_id in runs:
        await start_turn(turns, thread, turn_id)
    return runs


def _numbered(*requests: Req) -> list[Req]:
    for n, request in enumerate(requests, start=1):
        request.id = n
    return list(requests)


async def test_a_shared_frame_carries_several_runs_messages_and_answers_each_in_order(
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    (a_thread, a_turn), (b_thread, b_turn) = await _two_turns(turns)
    batch = _numbered(
        append_message(a_turn, 0, 1, 2),
        put_message(a_thread, a_turn, 0, "a-1"),
        append_message(b_turn, 0, 1),
        put_message(b_thread, b_turn, 0, "b-1"),
        Req(get=checkpoints_pb2.GetCheckpointRequest(thread_id=a_thread)),
    )

    [frame] = [
        answer
        async for answer in checkpoints.CheckpointStream(iter([Req(batch=batch, shared=True)]))
    ]

    assert [a.id for a in frame.batch] == [1, 2, 3, 4, 5]
    assert [a.WhichOneof("result") for a in frame.batch] == [
        "append",
        "put",
        "append",
        "put",
        "get",
    ]
    assert frame.batch[4].get.checkpoint.ref.checkpoint_id == "a-1"
    # Each run's boundary counts the events sent before its checkpoint.
    assert await redrive_turn(turns, a_turn) == ("a-1", 2)
    assert await redrive_turn(turns, b_turn) == ("b-1", 1)


async def test_on_a_shared_stream_a_stale_message_is_answered_aborted_and_the_others_go_on(
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    (a_thread, a_turn), (b_thread, b_turn) = await _two_turns(turns)
    await redrive_turn(turns, a_turn)  # attempt 0 of turn a is stale from here on
    first = _numbered(
        put_message(a_thread, a_turn, 0, "zombie-1"),
        append_message(a_turn, 0, 1),
        put_message(b_thread, b_turn, 0, "b-1"),
        put_message(a_thread, a_turn, 0, "zombie-2"),
    )
    then = put_message(b_thread, b_turn, 0, "b-2")
    then.id, then.shared = 9, True

    answers = [
        answer
        async for answer in checkpoints.CheckpointStream(
            iter([Req(batch=first, shared=True), then])
        )
    ]

    assert len(answers) == 2  # the stream went on past the stale messages
    codes = [a.error.code if a.HasField("error") else 0 for a in answers[0].batch]
    assert codes == [ABORTED, ABORTED, 0, ABORTED]
    assert "attempt" in answers[0].batch[0].error.message
    assert answers[1].id == 9 and answers[1].put.ref.checkpoint_id == "b-2"
    assert await stored_checkpoints(checkpoints, a_thread) == set()
    assert await stored_checkpoints(checkpoints, b_thread) == {"b-1", "b-2"}
    turn = await turns.GetTurn(turns_pb2.GetTurnRequest(turn_id=a_turn))
    assert turn.turn.last_seq == 0


async def test_a_frame_not_marked_shared_still_refuses_two_runs_writes(
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    (a_thread, a_turn), (b_thread, b_turn) = await _two_turns(turns)
    batch = _numbered(
        put_message(a_thread, a_turn, 0, "a-1"), put_message(b_thread, b_turn, 0, "b-1")
    )

    with pytest.raises(aio.AioRpcError) as info:
        async for _ in checkpoints.CheckpointStream(iter([Req(batch=batch)])):
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "mark the frame shared" in (info.value.details() or "")
    assert await stored_checkpoints(checkpoints, a_thread) == set()


async def test_the_client_gets_stale_attempt_for_its_stale_run_alone_on_a_shared_stream(
    service: TurnkeeperServer, turns: turns_pb2_grpc.TurnServiceAsyncStub
) -> None:
    (a_thread, a_turn), (b_thread, b_turn) = await _two_turns(turns)
    await redrive_turn(turns, a_turn)
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service.address)) as client:
        stream = AsyncRunStream(client, shared=True)
        try:
            # Once the service said it takes batches, both go in one frame.
            await stream.request(get=checkpoints_pb2.GetCheckpointRequest(thread_id=b_thread))
            stale, fine = await asyncio.gather(
                stream.request(put=put_message(a_thread, a_turn, 0, "zombie").put),
                stream.request(put=put_message(b_thread, b_turn, 0, "b-1").put),
                return_exceptions=True,
            )
            later = await stream.request(put=put_message(b_thread, b_turn, 0, "b-2").put)
        finally:
            stream.close()
            await stream.wait_closed()
    assert isinstance(stale, StaleAttempt)
    assert not isinstance(fine, BaseException) and fine.put.ref.checkpoint_id == "b-1"
    assert later.put.ref.checkpoint_id == "b-2"


async def test_a_saver_sharing_its_stream_runs_concurrent_turns_on_one_stream(
    service: TurnkeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six threads' runs (each with a subgraph that interrupts, then a resume) through
    one saver sharing its stream: one stream opened, frames carrying several runs'
    messages, and every thread's history as the same runs through a saver with a
    stream per run."""
    frames: list[Req] = []
    opened: list[object] = []
    make_call = AsyncTurnkeeperClient.open_checkpoint_stream

    def open_call(self: AsyncTurnkeeperClient) -> Any:
        opened.append(call := keep_frames(make_call(self), frames))
        return call

    monkeypatch.setattr(AsyncTurnkeeperClient, "open_checkpoint_stream", open_call)

    async def run(saver: RemoteSaver, thread: str) -> None:
        graph = build_graph(saver)
        config = durable_config(thread)
        await graph.ainvoke({"log": []}, config, durability="sync")
        await graph.ainvoke(Command(resume="yes"), config, durability="sync")

    prefix = uuid4().hex[:6]
    threads = [f"shared-{prefix}-{n}" for n in range(6)]
    async with RemoteSaver(service.address, stream=True, share_stream=True) as shared:
        await asyncio.gather(*(run(shared, thread) for thread in threads))
    assert len(opened) == 1
    threads_per_frame = [
        {_thread_of(message) for message in frame.batch} for frame in frames if frame.batch
    ]
    assert all(frame.shared for frame in frames)
    assert max(len(t) for t in threads_per_frame) > 1

    monkeypatch.undo()
    alone = [f"alone-{prefix}-{n}" for n in range(6)]
    async with RemoteSaver(service.address, stream=True, share_stream=False) as per_run:
        await asyncio.gather(*(run(per_run, thread) for thread in alone))
    with RemoteSaver.from_address(service.address) as reader:
        for thread, twin in zip(threads, alone, strict=True):
            # The blocking API, off the loop that serves it.
            mine = await asyncio.to_thread(history, reader, thread)
            assert mine == await asyncio.to_thread(history, reader, twin)
            assert len(mine) > 3


def _thread_of(message: Req) -> str:
    op = message.WhichOneof("op")
    if op == "put":
        return message.put.thread_id
    if op == "writes":
        return message.writes.thread_id
    if op == "get":
        return message.get.thread_id
    return message.append.turn_id


async def test_a_refused_input_checkpoint_on_a_shared_frame_refuses_its_own_run_alone(
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    """Decision 530 on a shared stream (decision 600): a run's put-off input
    checkpoint rides its first step's frame beside other runs' messages; refused by
    its checks, it refuses its own run's messages behind it, and the other run's
    messages around them in the same frame are written, boundary and all."""
    (a_thread, a_turn), (b_thread, b_turn) = await _two_turns(turns)
    a_writes = Req(
        writes=checkpoints_pb2.PutWritesRequest(
            thread_id=a_thread,
            checkpoint_id="input",
            task_id="task-1",
            fence=checkpoints_pb2.TurnFence(turn_id=a_turn, attempt=0),
        )
    )
    batch = _numbered(
        put_message(a_thread, a_turn, 0, ""),  # refused by its checks: no checkpoint_id
        append_message(b_turn, 0, 1),
        a_writes,
        put_message(b_thread, b_turn, 0, "b-0"),
        append_message(a_turn, 0, 1),
        put_message(a_thread, a_turn, 0, "a-0"),
    )

    [frame] = [
        answer
        async for answer in checkpoints.CheckpointStream(iter([Req(batch=batch, shared=True)]))
    ]

    results = [a.WhichOneof("result") for a in frame.batch]
    assert results == ["error", "append", "error", "put", "error", "error"]
    assert "checkpoint_id" in frame.batch[0].error.message
    for n in (2, 4, 5):
        assert "message 1 before it in this frame was refused" in frame.batch[n].error.message
    assert await stored_checkpoints(checkpoints, a_thread) == set()
    a_status = await turns.GetTurn(turns_pb2.GetTurnRequest(turn_id=a_turn))
    assert a_status.turn.last_seq == 0
    assert await redrive_turn(turns, b_turn) == ("b-0", 1)
    # Once answered, the refused run's next frame on the stream is taken as usual.
    again = _numbered(append_message(a_turn, 0, 1), put_message(a_thread, a_turn, 0, "a-0"))
    [frame] = [
        answer
        async for answer in checkpoints.CheckpointStream(iter([Req(batch=again, shared=True)]))
    ]
    assert [a.WhichOneof("result") for a in frame.batch] == ["append", "put"]


async def test_one_runs_refused_write_on_a_shared_stream_fails_no_other_run(
    service: TurnkeeperServer,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the client, as the bridge's runs meet it: run a's put refused by the
    service's checks raises for run a alone; run b's put, sent in the same frame,
    and b's next one are answered, and so is a's next put."""
    (a_thread, a_turn), (b_thread, b_turn) = await _two_turns(turns)
    frames: list[Req] = []
    make_call = AsyncTurnkeeperClient.open_checkpoint_stream
    monkeypatch.setattr(
        AsyncTurnkeeperClient,
        "open_checkpoint_stream",
        lambda self: keep_frames(make_call(self), frames),
    )
    async with AsyncTurnkeeperClient(ConnectionOptions(target=service.address)) as client:
        stream = AsyncRunStream(client, shared=True)
        try:
            # Once the service said it takes batches, both go in one frame.
            await stream.request(get=checkpoints_pb2.GetCheckpointRequest(thread_id=b_thread))
            refused, fine = await asyncio.gather(
                stream.request(put=put_message(a_thread, a_turn, 0, "").put),
                stream.request(put=put_message(b_thread, b_turn, 0, "b-1").put),
                return_exceptions=True,
            )
            later = await stream.request(put=put_message(b_thread, b_turn, 0, "b-2").put)
            again = await stream.request(put=put_message(a_thread, a_turn, 0, "a-1").put)
        finally:
            stream.close()
            await stream.wait_closed()
    assert any({_thread_of(m) for m in f.batch} == {a_thread, b_thread} for f in frames)
    assert isinstance(refused, InvalidArgument) and "checkpoint_id" in str(refused)
    assert not isinstance(fine, BaseException) and fine.put.ref.checkpoint_id == "b-1"
    assert later.put.ref.checkpoint_id == "b-2"
    assert again.put.ref.checkpoint_id == "a-1"
