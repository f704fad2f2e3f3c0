"""The event log's order on the saver's stream (decision 420): a step's events are
sent ahead of its writes and its checkpoint, without waiting for their answer, so
they share a frame; the boundary rule holds because the stream commits its messages
in the order they were sent.

The stream here is a fake with the real one's shape: a message takes its place on
the stream when its request is called (before the first await, as
`AsyncRunStream.request` puts it in the next frame), and is answered when the test
says. So each test sees the order messages were sent in, and what was sent before
anything was answered (one frame).
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from turnkeeper.agent.bridge._events import EventLog
from turnkeeper.errors import InvalidArgument
from turnkeeper.v1 import turns_pb2


class FakeStream:
    """Messages in the order they were sent; each answered by `answer()`."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []
        self._answers: list[asyncio.Future[Any]] = []
        self._more = asyncio.Event()

    async def _message(self, kind: str, what: Any, answer: Any) -> Any:
        self.sent.append((kind, what))
        self._more.set()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._answers.append(future)
        got = await future
        if isinstance(got, BaseException):
            raise got
        return answer if got is None else got

    async def append(self, request: turns_pb2.AppendEventsRequest) -> Any:
        seqs = [e.seq for e in request.events]
        return await self._message(
            "append", seqs, turns_pb2.AppendEventsResponse(last_seq=seqs[-1])
        )

    def store(self, last_seq: int | None = None) -> Any:
        async def put(boundary: int) -> tuple[str, int]:
            await self._message("put", boundary, None)
            return "stored", boundary if last_seq is None else last_seq

        return put

    async def writes(self) -> str:
        return str(await self._message("writes", None, "written"))

    async def until_sent(self, n: int) -> None:
        async with asyncio.timeout(5):
            while len(self.sent) < n:
                self._more.clear()
                await self._more.wait()

    def answer(self, *outcomes: Any) -> None:
        """Answer the oldest unanswered messages, in order (None: as it asked)."""
        pending = [f for f in self._answers if not f.done()]
        for future, outcome in zip(pending, outcomes or (None,) * len(pending), strict=False):
            future.set_result(outcome)


class _Client:
    async def append_events(self, request: Any) -> Any:  # pragma: no cover - unused
        raise AssertionError("the unary path is not used on the stream")


@pytest.fixture
def stream() -> FakeStream:
    return FakeStream()


async def log_on(stream: FakeStream, last_seq: int = 0) -> EventLog:
    events = EventLog(_Client(), "turn-1", 1, last_seq)  # type: ignore[arg-type]
    events.send_through(stream.append)
    return events


async def test_a_checkpoint_goes_in_the_frame_of_the_events_before_it(stream: FakeStream) -> None:
    events = await log_on(stream, last_seq=3)
    events.emit("step", {"n": 1})
    events.emit("values", {"n": 1})
    storing = asyncio.ensure_future(events.checkpoint(stream.store()))
    await stream.until_sent(2)
    # Both sent before either was answered; the events first, the boundary theirs.
    assert stream.sent == [("append", [4, 5]), ("put", 5)]
    stream.answer()
    assert await storing == "stored"
    assert events.appended_seq == 5


async def test_a_tasks_writes_go_behind_the_events_and_the_checkpoint_behind_both(
    stream: FakeStream,
) -> None:
    events = await log_on(stream)
    events.emit("step", {"n": 1})
    writing = asyncio.ensure_future(events.ahead_of(stream.writes))
    await stream.until_sent(2)
    events.emit("values", {"n": 1})
    storing = asyncio.ensure_future(events.checkpoint(stream.store()))
    await stream.until_sent(4)
    # One frame: nothing waited for an answer, and the order is the rule's.
    assert stream.sent == [("append", [1]), ("writes", None), ("append", [2]), ("put", 2)]
    stream.answer()
    assert await writing == "written"
    assert await storing == "stored"


async def test_a_checkpoint_is_sent_behind_an_append_still_in_flight(stream: FakeStream) -> None:
    events = await log_on(stream)
    events.emit("token", {"text": "a"})
    flushing = asyncio.ensure_future(events.flush())
    await stream.until_sent(1)
    events.emit("token", {"text": "b"})
    storing = asyncio.ensure_future(events.checkpoint(stream.store()))
    await stream.until_sent(3)
    assert stream.sent == [("append", [1]), ("append", [2]), ("put", 2)]
    stream.answer()
    assert await flushing == 2
    assert await storing == "stored"


async def test_events_emitted_during_a_checkpoint_follow_the_services_own(
    stream: FakeStream,
) -> None:
    events = await log_on(stream)
    events.emit("step", {"n": 1})
    # The service writes two events of its own with the checkpoint (decision 271).
    storing = asyncio.ensure_future(events.checkpoint(stream.store(last_seq=3)))
    await stream.until_sent(2)
    events.emit("token", {"text": "late"})  # numbered 2 for now, not sent
    await asyncio.sleep(0)
    flushing = asyncio.ensure_future(events.flush())  # waits for the checkpoint
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(stream.sent) == 2
    stream.answer()
    await storing
    await stream.until_sent(3)
    assert stream.sent[2] == ("append", [4])
    stream.answer()
    assert await flushing == 4
    assert events.last_seq == 4


async def test_a_refused_append_fails_the_checkpoint_behind_it(stream: FakeStream) -> None:
    events = await log_on(stream)
    events.emit("step", {"n": 1})
    storing = asyncio.ensure_future(events.checkpoint(stream.store()))
    await stream.until_sent(2)
    refused = InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, "event seq 1: too deep")
    stream.answer(refused, None)
    with pytest.raises(InvalidArgument):
        await storing
    # Not appended: sent again by the next flush.
    flushing = asyncio.ensure_future(events.flush())
    await stream.until_sent(3)
    assert stream.sent[2] == ("append", [1])
    stream.answer()
    assert await flushing == 1


async def test_closing_waits_for_the_appends_under_way(stream: FakeStream) -> None:
    events = await log_on(stream)
    events.emit("token", {"text": "a"})
    flushing = asyncio.ensure_future(events.flush())
    await stream.until_sent(1)
    closing = asyncio.ensure_future(events.close(("final", {})))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not closing.done()
    stream.answer()
    await flushing
    # The token went with its append, not again with the turn's end.
    assert [(e.seq, e.type) for e in await closing] == [(2, "final")]


async def test_an_input_checkpoint_put_off_rides_the_first_steps_frame(
    stream: FakeStream,
) -> None:
    """Decision 530: put off, the input checkpoint returns at once with nothing sent;
    the first step's writes join it unsent, and its checkpoint sends all four in one
    frame, the input first, answered before the step's checkpoint returns."""
    events = await log_on(stream)
    await events.checkpoint_later(stream.store())
    assert await events.write_later(stream.writes)
    for _ in range(5):
        await asyncio.sleep(0)
    assert stream.sent == []
    events.emit("values", {"n": 1})
    storing = asyncio.ensure_future(events.checkpoint(stream.store()))
    await stream.until_sent(4)
    assert stream.sent == [("put", 0), ("writes", None), ("append", [1]), ("put", 1)]
    stream.answer(None, None, None)  # the step's checkpoint still unanswered
    for _ in range(5):
        await asyncio.sleep(0)
    assert not storing.done()
    stream.answer()
    assert await storing == "stored"
    assert not events.put_off


@pytest.mark.parametrize("refused", ["input", "writes"])
async def test_a_refused_input_checkpoint_fails_the_step_behind_it_first(
    stream: FakeStream, refused: str
) -> None:
    events = await log_on(stream)
    await events.checkpoint_later(stream.store())
    assert await events.write_later(stream.writes)
    events.emit("values", {"n": 1})
    storing = asyncio.ensure_future(events.checkpoint(stream.store()))
    await stream.until_sent(4)
    error = InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, f"the {refused} was refused")
    behind = InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, "not written: message 1 ...")
    if refused == "input":
        stream.answer(error, behind, behind, behind)
    else:
        stream.answer(None, error, behind, behind)
    with pytest.raises(InvalidArgument, match=f"the {refused} was refused"):
        await storing
    # Still unchecked: the run's end (settle) raises it again, never ends DONE on it.
    with pytest.raises(InvalidArgument, match=f"the {refused} was refused"):
        await events.settle()


async def test_settle_sends_a_checkpoint_put_off_and_waits_for_its_answer(
    stream: FakeStream,
) -> None:
    events = await log_on(stream, last_seq=2)
    await events.checkpoint_later(stream.store())
    settling = asyncio.ensure_future(events.settle())
    await stream.until_sent(1)
    assert stream.sent == [("put", 2)]
    assert not settling.done()
    stream.answer()
    await settling
    assert not events.put_off
    # A write with no checkpoint put off is the caller's to send.
    assert not await events.write_later(stream.writes)


async def test_a_checkpoint_put_off_with_events_of_the_services_own_fails(
    stream: FakeStream,
) -> None:
    """Put off only where the service writes no events with it (its turn has no
    effect yet); an answer that says otherwise fails the run rather than number
    the events sent behind it over the service's."""
    events = await log_on(stream)
    await events.checkpoint_later(stream.store(last_seq=1))
    settling = asyncio.ensure_future(events.settle())
    await stream.until_sent(1)
    stream.answer()
    with pytest.raises(RuntimeError, match="wrote events with a checkpoint put off"):
        await settling


async def test_events_waiting_go_before_a_write_behind_a_checkpoint_put_off(
    stream: FakeStream,
) -> None:
    events = await log_on(stream)
    await events.checkpoint_later(stream.store())
    events.emit("token", {"text": "a"})
    # An event waits to be sent: the write goes now, behind it and the checkpoint.
    assert not await events.write_later(stream.writes)
    writing = asyncio.ensure_future(events.ahead_of(stream.writes))
    await stream.until_sent(3)
    assert stream.sent == [("put", 0), ("append", [1]), ("writes", None)]
    stream.answer()
    assert await writing == "written"
    assert not events.put_off


async def test_a_tasks_writes_put_off_go_in_the_frame_of_the_steps_checkpoint(
    stream: FakeStream,
) -> None:
    """Decision 771: the writes wait for the step's checkpoint, behind the events
    emitted before them, and the events emitted after them go behind them."""
    events = await log_on(stream)
    events.emit("step", {"n": 1})
    assert await events.write_with_step(stream.writes)
    # Nothing sent yet: the writes are put off, the step's event with them.
    assert events.put_off and events.last_seq == 1 and events.appended_seq == 0
    events.emit("values", {"n": 1})
    storing = asyncio.ensure_future(events.checkpoint(stream.store()))
    await stream.until_sent(4)
    assert stream.sent == [("append", [1]), ("writes", None), ("append", [2]), ("put", 2)]
    stream.answer()
    assert await storing == "stored"
    assert not events.put_off and events.appended_seq == 2


async def test_refused_writes_put_off_fail_the_checkpoint_behind_them(
    stream: FakeStream,
) -> None:
    events = await log_on(stream)
    events.emit("step", {"n": 1})
    assert await events.write_with_step(stream.writes)
    storing = asyncio.ensure_future(events.checkpoint(stream.store()))
    await stream.until_sent(3)
    refused = InvalidArgument(grpc.StatusCode.INVALID_ARGUMENT, "the writes were refused")
    stream.answer(None, refused, None)
    with pytest.raises(InvalidArgument, match="the writes were refused"):
        await storing


async def test_writes_put_off_are_sent_alone_when_no_checkpoint_follows_them(
    stream: FakeStream,
) -> None:
    """Decision 772: a task that ended while a sibling task of its step still runs
    has its writes stored without waiting for the sibling (the step's checkpoint
    comes only after it): had the agent died meanwhile, the task would run again."""
    events = await log_on(stream)
    flusher = asyncio.ensure_future(events.run(lambda exc: None))
    try:
        events.emit("step", {"n": 1})
        assert await events.write_with_step(stream.writes)
        # No checkpoint, no other message: the writes go on their own, behind
        # the step's event.
        await stream.until_sent(2)
        assert stream.sent == [("append", [1]), ("writes", None)]
        stream.answer()
    finally:
        flusher.cancel()
