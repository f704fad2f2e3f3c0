"""CheckpointStream on the wire: each message answered with its id after its commit,
a refused message answered alone while the stream goes on, events and a checkpoint
on one stream committed in order (the checkpoint's boundary counts the events sent
before it), and a stale attempt ending the stream with ABORTED so that nothing sent
after it on the stream is stored. The same for a frame that carries a batch of
messages, and the client batching what a graph step asks for together."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any
from uuid import uuid4

import grpc
import pytest
from grpc import aio
from turnkeeper.agent.saver._stream import AsyncRunStream, RunStreams
from turnkeeper.client import ConnectionOptions
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.streams import (
    CountingClient,
    append_message,
    put_message,
    redrive_turn,
    start_turn,
    stored_checkpoints,
)

# The turns here are a replica's, written by the test itself: no agent renews their lease.
pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends, pytest.mark.unrenewed]

Req = checkpoints_pb2.CheckpointStreamRequest


def number(requests: Iterable[Req]) -> None:
    """Ids 1, 2, ... in the order the stream is sent them."""
    for n, request in enumerate(requests, start=1):
        request.id = n


async def answered(
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub, batch: list[Req]
) -> checkpoints_pb2.CheckpointStreamResponse:
    """`batch` sent as one frame, numbered from 1: its one answer frame."""
    number(batch)
    [frame] = [answer async for answer in checkpoints.CheckpointStream(iter([Req(batch=batch)]))]
    return frame


async def assert_the_runs_next_frame_is_taken(
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    thread: str,
    turn_id: str,
    checkpoint_id: str,
) -> None:
    """After a refusal the stream goes on: the run's next step is stored as usual."""
    again = [append_message(turn_id, 0, 1), put_message(thread, turn_id, 0, checkpoint_id)]
    frame = await answered(checkpoints, again)
    assert [a.WhichOneof("result") for a in frame.batch] == ["append", "put"]


@pytest.fixture
async def started(turns: turns_pb2_grpc.TurnServiceAsyncStub) -> tuple[str, str]:
    """A RUNNING turn (attempt 0) on a thread of its own: (thread_id, turn_id)."""
    thread, turn_id = f"s-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
    await start_turn(turns, thread, turn_id)
    return thread, turn_id


async def test_stream_answers_in_order_and_a_refusal_does_not_end_it(
    started: tuple[str, str],
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    thread, turn_id = started
    events = [
        turns_pb2.EventInput(seq=seq, type="token", data_json=f'{{"n": {seq}}}')
        for seq in (1, 2, 3)
    ]
    append = Req(append=turns_pb2.AppendEventsRequest(turn_id=turn_id, attempt=0, events=events))
    bad = put_message(thread, turn_id, 0, "")
    get = Req(get=checkpoints_pb2.GetCheckpointRequest(thread_id=thread))
    requests = [append, put_message(thread, turn_id, 0, "cp-1"), bad, get, Req()]
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
    assert await redrive_turn(turns, turn_id) == ("cp-1", 3)


async def test_a_stale_attempt_ends_the_stream_with_aborted(
    started: tuple[str, str],
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    thread, turn_id = started
    await redrive_turn(turns, turn_id)
    # Attempt 0 was re-driven away; attempt 1's put comes after it on the stream.
    stale, after = (
        put_message(thread, turn_id, 0, "zombie"),
        put_message(thread, turn_id, 1, "after"),
    )
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


async def test_a_batch_is_answered_in_one_frame_in_its_order(
    started: tuple[str, str],
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    thread, turn_id = started
    batch = [
        append_message(turn_id, 0, 1, 2, 3),
        put_message(thread, turn_id, 0, "cp-1"),
        Req(),  # refused alone (it carries nothing): the batch goes on
        append_message(turn_id, 0, 4),
        put_message(thread, turn_id, 0, "cp-2"),
        Req(get=checkpoints_pb2.GetCheckpointRequest(thread_id=thread)),
    ]
    frame = await answered(checkpoints, batch)

    assert frame.accepts_batch
    assert [a.id for a in frame.batch] == [1, 2, 3, 4, 5, 6]
    assert [a.WhichOneof("result") for a in frame.batch] == [
        "append",
        "put",
        "error",
        "append",
        "put",
        "get",
    ]
    assert frame.batch[3].append.last_seq == 4
    assert frame.batch[2].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    # Each message saw the ones before it committed: the get finds cp-2, written
    # just before it in the same frame, and cp-2's boundary counts the 4th event.
    assert frame.batch[5].get.checkpoint.ref.checkpoint_id == "cp-2"
    assert await redrive_turn(turns, turn_id) == ("cp-2", 4)


async def test_a_refused_append_in_a_batch_refuses_its_runs_writes_behind_it(
    started: tuple[str, str],
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    """The bridge sends a step's events and its writes and checkpoint in one frame
    without waiting for the events' answer (decision 420): a refused append must not
    leave a checkpoint behind it whose boundary counts events never appended."""
    thread, turn_id = started
    bad = append_message(turn_id, 0, 1)
    bad.append.events[0].type = ""  # refused by its checks
    batch = [
        bad,
        Req(
            writes=checkpoints_pb2.PutWritesRequest(
                thread_id=thread,
                checkpoint_id="cp-0",
                fence=checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=0),
            )
        ),
        put_message(thread, turn_id, 0, "cp-1"),
    ]
    frame = await answered(checkpoints, batch)

    assert [a.WhichOneof("result") for a in frame.batch] == ["error", "error", "error"]
    assert "type must be" in frame.batch[0].error.message
    for answer in frame.batch[1:]:
        assert answer.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert "message 1 before it in this frame was refused" in answer.error.message
    assert await stored_checkpoints(checkpoints, thread) == set()
    # The stream goes on: the same run's next frame is taken as usual.
    await assert_the_runs_next_frame_is_taken(checkpoints, thread, turn_id, "cp-1")


async def test_a_refused_input_checkpoint_refuses_the_step_sent_behind_it(
    started: tuple[str, str],
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    """The bridge sends a new thread's input checkpoint with its first step's writes,
    events and checkpoint, unanswered (decision 530): a turn attempt's put refused by
    its checks refuses its run's messages behind it (in its frame, and in the frames
    read ahead before its answer, as a refused append does), and nothing of them is
    stored. An unfenced write refused
    by its checks is refused alone, as before."""
    thread, turn_id = started
    writes = Req(
        writes=checkpoints_pb2.PutWritesRequest(
            thread_id=thread,
            checkpoint_id="input",
            task_id="task-1",
            fence=checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=0),
        )
    )
    first = [
        put_message(thread, turn_id, 0, ""),  # refused by its checks: no checkpoint_id
        writes,
        append_message(turn_id, 0, 1),
        put_message(thread, turn_id, 0, "step-0"),
    ]
    frame = await answered(checkpoints, first)

    assert [a.WhichOneof("result") for a in frame.batch] == ["error"] * 4
    assert "checkpoint_id" in frame.batch[0].error.message
    for answer in frame.batch[1:]:
        assert answer.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], answer
        assert "message 1 before it in this frame was refused" in answer.error.message
    assert await stored_checkpoints(checkpoints, thread) == set()
    status = await turns.GetTurn(turns_pb2.GetTurnRequest(turn_id=turn_id))
    assert status.turn.last_seq == 0

    # Unfenced: refused alone, and what follows it is written.
    unfenced = [put_message(f"{thread}-free", "", 0, ""), put_message(f"{thread}-free", "", 0, "c")]
    for request in unfenced:
        request.put.ClearField("fence")
    frame = await answered(checkpoints, unfenced)
    assert [a.WhichOneof("result") for a in frame.batch] == ["error", "put"]


async def test_a_stale_attempt_in_a_batch_ends_the_stream_and_nothing_after_it_isstored_checkpoints(
    started: tuple[str, str],
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    thread, turn_id = started
    await redrive_turn(turns, turn_id)
    batch = [
        put_message(thread, turn_id, 0, "zombie-1"),
        append_message(turn_id, 0, 1),
        put_message(thread, turn_id, 0, "zombie-2"),
    ]
    number(batch)

    with pytest.raises(aio.AioRpcError) as info:
        async for _ in checkpoints.CheckpointStream(iter([Req(batch=batch)])):
            pass
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert await stored_checkpoints(checkpoints, thread) == set()
    turn = await turns.GetTurn(turns_pb2.GetTurnRequest(turn_id=turn_id))
    assert turn.turn.last_seq == 0


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        pytest.param(
            lambda thread, turn_id: Req(
                batch=[put_message(thread, turn_id, 0, "a"), put_message(thread, turn_id, 1, "b")]
            ),
            "one turn attempt",
            id="two-attempts",
        ),
        pytest.param(
            lambda thread, turn_id: Req(batch=[Req(batch=[put_message(thread, turn_id, 0, "a")])]),
            "batch of its own",
            id="nested",
        ),
        pytest.param(
            lambda thread, turn_id: Req(id=7, batch=[put_message(thread, turn_id, 0, "a")]),
            "not both",
            id="message-and-batch",
        ),
        pytest.param(
            lambda thread, turn_id: Req(
                batch=[put_message(thread, turn_id, 0, f"c{n}") for n in range(257)]
            ),
            "the limit is 256",
            id="too-many",
        ),
    ],
)
async def test_a_malformed_batch_is_refused_whole(
    started: tuple[str, str],
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    frame: Any,
    says: str,
) -> None:
    thread, turn_id = started

    with pytest.raises(aio.AioRpcError) as info:
        async for _ in checkpoints.CheckpointStream(iter([frame(thread, turn_id)])):
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert says in (info.value.details() or "")
    assert await stored_checkpoints(checkpoints, thread) == set()


async def test_the_client_batches_what_is_asked_for_together_once_the_service_says_it_may(
    service: TurnkeeperServer, started: tuple[str, str]
) -> None:
    thread, turn_id = started
    async with CountingClient(ConnectionOptions(target=f"127.0.0.1:{service.port}")) as client:
        client.frames = []
        stream = AsyncRunStream(client)
        try:
            # Asked for together before any answer: one frame each (no batch yet).
            first = await asyncio.gather(
                stream.request(get=checkpoints_pb2.GetCheckpointRequest(thread_id=thread)),
                stream.request(append=append_message(turn_id, 0, 1, 2).append),
            )
            assert len(client.frames) == 2 and not any(f.batch for f in client.frames)
            # A step's writes and checkpoint, asked for on one turn of the loop: one frame.
            step = await asyncio.gather(
                stream.request(append=append_message(turn_id, 0, 3).append),
                stream.request(put=put_message(thread, turn_id, 0, "cp-1").put),
                stream.request(get=checkpoints_pb2.GetCheckpointRequest(thread_id=thread)),
            )
            # Asked for one after another: one frame each, as without batches.
            alone = await stream.request(put=put_message(thread, turn_id, 0, "cp-2").put)
        finally:
            stream.close()
            await stream.wait_closed()

    assert first[1].append.last_seq == 2
    assert [len(f.batch) for f in client.frames] == [0, 0, 3, 0]
    assert step[0].append.last_seq == 3
    assert step[1].put.ref.checkpoint_id == "cp-1"
    assert step[2].get.checkpoint.ref.checkpoint_id == "cp-1"
    assert alone.put.ref.checkpoint_id == "cp-2"


async def test_a_new_run_takes_an_idle_stream_and_never_one_with_a_message_unanswered(
    service: TurnkeeperServer,
) -> None:
    async with CountingClient(ConnectionOptions(target=f"127.0.0.1:{service.port}")) as client:
        client.frames = []
        opened: list[object] = []
        make_call = client.open_checkpoint_stream

        def open_call() -> Any:
            opened.append(call := make_call())
            return call

        client.open_checkpoint_stream = open_call  # type: ignore[method-assign]
        streams: RunStreams[AsyncRunStream] = RunStreams(lambda: AsyncRunStream(client))
        get = checkpoints_pb2.GetCheckpointRequest
        try:
            first = streams.get(("thread", "a", 0))
            await first.request(get=get(thread_id="a"))
            # Run a is answered: run b goes on its stream, no new one is opened.
            assert streams.get(("thread", "b", 0)) is first
            pending = asyncio.ensure_future(first.request(get=get(thread_id="b")))
            await asyncio.sleep(0)  # one turn of the loop: the task registers b's message
            assert not first.idle
            # Run a asks again while b has a message unanswered: a stream of its own.
            second = streams.get(("thread", "a", 0))
            assert second is not first
            await asyncio.gather(pending, second.request(get=get(thread_id="a")))
            # A run that ended leaves its stream open for the next one.
            streams.drop(("thread", "a", 0))
            assert streams.get(("thread", "c", 0)) is second
            await second.request(get=get(thread_id="c"))
        finally:
            await streams.aclose()
    assert len(opened) == 2


async def test_a_run_stopped_while_its_message_is_written_leaves_its_stream_usable(
    service: TurnkeeperServer,
) -> None:
    # The bridge cancels the execution of a turn that ended under it, and grpc cancels
    # a stream's call when a write on it is cancelled: the stream, a spare for the next
    # run, must answer that run on a new call (it waited unanswered for five minutes).
    get = checkpoints_pb2.GetCheckpointRequest
    async with CountingClient(ConnectionOptions(target=f"127.0.0.1:{service.port}")) as client:
        client.frames = []
        # Cancelled after 0, 1, 2, ... turns of the loop: before, during and after the
        # first write of a new stream's call (made in the asking task).
        for turns_of_the_loop in range(8):
            stream = AsyncRunStream(client)
            try:
                stopped = asyncio.ensure_future(stream.request(get=get(thread_id="a")))
                for _ in range(turns_of_the_loop):
                    await asyncio.sleep(0)
                stopped.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await stopped
                answer = await asyncio.wait_for(stream.request(get=get(thread_id="b")), 20)
                assert answer.WhichOneof("result") == "get"
            finally:
                stream.close()
                await stream.wait_closed()


async def test_the_client_splits_what_is_asked_for_together_into_frames_the_service_takes(
    service: TurnkeeperServer, started: tuple[str, str]
) -> None:
    thread, _ = started
    get = checkpoints_pb2.GetCheckpointRequest(thread_id=thread)
    async with CountingClient(ConnectionOptions(target=f"127.0.0.1:{service.port}")) as client:
        client.frames = []
        stream = AsyncRunStream(client)
        try:
            await stream.request(get=get)  # the service says it takes batches
            answers = await asyncio.gather(*(stream.request(get=get) for _ in range(300)))
        finally:
            stream.close()
            await stream.wait_closed()
    # The service refuses a frame of more than 256 messages whole.
    assert [len(f.batch) for f in client.frames] == [0, 256, 44]
    assert [a.WhichOneof("result") for a in answers] == ["get"] * 300


class _Gate:
    """The service's first `write_batch` answers only once a second one was queued
    (or after `patience` s): whether the service took a frame while one committed."""

    def __init__(self, service: TurnkeeperServer, patience: float = 3.0) -> None:
        self.real = service.engine.checkpoints.write_batch
        self.second = asyncio.Event()
        self.calls = 0
        self.patience = patience
        self.took_ahead: bool | None = None

    async def write_batch(self, writes: Any, *, followed: bool) -> list[asyncio.Future[Any]]:
        self.calls += 1
        done = await self.real(writes, followed=followed)
        if self.calls == 1:
            return [asyncio.ensure_future(self._after(future)) for future in done]
        self.second.set()
        return done

    async def _after(self, future: asyncio.Future[Any]) -> Any:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.second.wait(), self.patience)
        if self.took_ahead is None:
            self.took_ahead = self.second.is_set()
        return await future


async def test_the_next_frame_is_taken_while_one_commits_and_answered_after_it(
    started: tuple[str, str],
    service: TurnkeeperServer,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 490: a frame sent before the previous one's answer is read and
    queued while that one commits (so both can share a group commit), and the
    answers keep the frames' order."""
    thread, turn_id = started
    gate = _Gate(service)
    monkeypatch.setattr(service.engine.checkpoints, "write_batch", gate.write_batch)
    first = [append_message(turn_id, 0, 1, 2), put_message(thread, turn_id, 0, "cp-1")]
    second = [append_message(turn_id, 0, 3), put_message(thread, turn_id, 0, "cp-2")]
    number(first + second)
    frames = [Req(batch=first), Req(batch=second)]

    answers = [answer async for answer in checkpoints.CheckpointStream(iter(frames))]

    assert gate.took_ahead is True
    assert [[a.id for a in frame.batch] for frame in answers] == [[1, 2], [3, 4]]
    assert [a.WhichOneof("result") for frame in answers for a in frame.batch] == [
        "append",
        "put",
        "append",
        "put",
    ]
    assert answers[1].batch[0].append.last_seq == 3
    assert await redrive_turn(turns, turn_id) == ("cp-2", 3)


async def test_a_refused_append_refuses_its_runs_writes_in_frames_sent_before_its_answer(
    service: TurnkeeperServer,
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Decision 420's rule across frames read ahead (decision 490): a run's writes
    sent behind its refused append, before the client could see the refusal, are
    refused unwritten; another run's in the same shared frame are written, and a
    frame read after the refusal was answered is taken as usual."""
    runs = []
    for _ in range(2):
        thread, turn_id = f"s-{uuid4().hex[:8]}", f"t-{uuid4().hex[:8]}"
        await start_turn(turns, thread, turn_id)
        runs.append((thread, turn_id))
    (thread_a, turn_a), (thread_b, turn_b) = runs
    gate = _Gate(service)
    monkeypatch.setattr(service.engine.checkpoints, "write_batch", gate.write_batch)
    bad = append_message(turn_a, 0, 1)
    bad.append.events[0].type = ""  # refused by its checks
    first = [put_message(thread_a, turn_a, 0, "a-0"), bad]
    second = [put_message(thread_a, turn_a, 0, "a-1"), put_message(thread_b, turn_b, 0, "b-1")]
    number(first + second)

    frames = [Req(batch=first, shared=True), Req(batch=second, shared=True)]
    answers = [answer async for answer in checkpoints.CheckpointStream(iter(frames))]

    assert gate.took_ahead is True
    assert [a.WhichOneof("result") for frame in answers for a in frame.batch] == [
        "put",
        "error",
        "error",
        "put",
    ]
    refused = answers[1].batch[0].error
    assert refused.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "message 2 before it on this stream, unanswered, was refused" in refused.message
    assert "type must be" in refused.message
    assert await stored_checkpoints(checkpoints, thread_a) == {"a-0"}
    assert await stored_checkpoints(checkpoints, thread_b) == {"b-1"}

    # Once the refusal is answered, the run's next frame is taken as usual.
    await assert_the_runs_next_frame_is_taken(checkpoints, thread_a, turn_a, "a-1")


async def test_frames_read_ahead_of_a_stale_one_are_fenced_and_a_read_sees_the_writes_before_it(
    started: tuple[str, str],
    turns: turns_pb2_grpc.TurnServiceAsyncStub,
    checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
) -> None:
    """Decision 490 keeps the stream's rules for frames sent without waiting: a read
    waits for the writes of the frames before it, and a stale attempt's frames,
    however far ahead they were read, store nothing and end the stream."""
    thread, turn_id = started
    frames = [
        Req(batch=[append_message(turn_id, 0, 1), put_message(thread, turn_id, 0, "cp-1")]),
        Req(batch=[append_message(turn_id, 0, 2), put_message(thread, turn_id, 0, "cp-2")]),
        Req(get=checkpoints_pb2.GetCheckpointRequest(thread_id=thread)),
    ]
    number([*frames[0].batch, *frames[1].batch, frames[2]])
    answers = [answer async for answer in checkpoints.CheckpointStream(iter(frames))]
    assert answers[2].get.checkpoint.ref.checkpoint_id == "cp-2"

    await redrive_turn(turns, turn_id)
    stale = [
        Req(batch=[append_message(turn_id, 0, 3), put_message(thread, turn_id, 0, f"z-{n}")])
        for n in range(3)
    ]
    with pytest.raises(aio.AioRpcError) as info:
        async for _ in checkpoints.CheckpointStream(iter(stale)):
            pass
    assert info.value.code() == grpc.StatusCode.ABORTED
    assert await stored_checkpoints(checkpoints, thread) == {"cp-1", "cp-2"}
    turn = await turns.GetTurn(turns_pb2.GetTurnRequest(turn_id=turn_id))
    assert turn.turn.last_seq == 2
