"""CheckpointStream: one graph run's gets, puts, writes and event appends on one
open bidirectional stream.

Each message is handled by the very servicer method its unary RPC runs (same
validation, same authorization checks, same Engine call), after the check of the
caller's right to that RPC, so the stream behaves
like the unary calls on any store backend and costs the service one stream's
set-up instead of grpc's per-call machinery for every step.

Messages are handled in the order they arrive, and each answer is sent after its
commit: events appended before a checkpoint on the same stream are committed
before it, which is the boundary rule by construction. The next frames are read
while one commits (up to `MAX_AHEAD`, decision 490): each is checked and its writes
queued behind the previous frame's, and the answers go out in the frames' order. A
frame that reads, or on a run's own stream writes for another run than the frames
still out, waits until those are answered, as every frame did before. A fenced message (a stale
attempt) ends the stream with ABORTED, as the unary call would answer, and no
answer follows it; any other refusal answers that message alone and the stream
goes on, so one bad request does not fail the requests the client has pipelined
behind it.

A frame may carry a batch of messages (a graph step's writes and its checkpoint,
which LangGraph hands the saver together): one frame each way instead of one per
message. Their writes are pipelined. The puts and writes in a row of a batch are
checked as their unary calls check them, all of them first, then committed
together in the batch's order, with no task per message; the engine decides how
they reach the store (engine/checkpoints.py's `write_batch`). Other messages
(appends) run as their unary call in a task of their own, and the next message
waits until that one's write is queued (`Engine.pipelined`); on PostgreSQL, until
it is committed. A read in a
batch waits for the writes before it to commit. The writes of one batch carry one
turn attempt's fence (or none), so a stale attempt's refusal refuses every write
after it in the batch as well.

An append refused on its own (its events' checks) refuses the writes of its run
after it in the same batch, and in the frames read before its answer went out,
unwritten: they were sent behind it without waiting for its answer (decisions 420,
490), and a checkpoint must not record events that were not appended. So does a
turn attempt's put or writes refused by its checks: the bridge sends a run's first
step behind its input checkpoint unanswered (decision 530), and that step must not
be stored on an input checkpoint that was not.

A *shared* stream carries several runs' messages (the client marks its frames
`shared`: one stream per client event loop, so one frame each way carries a step of
several runs). Its batches may hold several runs' writes, and a stale attempt's
message is answered ABORTED on its own, as any other refusal, instead of ending
the stream for every run on it. Each later message of that run is refused by its
own fence check (an attempt re-driven away never becomes current again), so the
run still stops at its first stale write (decision 155).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, NamedTuple

from grpc import aio
from turnkeeper.v1 import checkpoints_pb2

from turnkeeper_server import limits as lim
from turnkeeper_server.audit import AuditLog
from turnkeeper_server.engine import Engine
from turnkeeper_server.errors import InvalidArgument, StaleAttempt, TurnkeeperError, status_for
from turnkeeper_server.limits import Limits
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.operations.threads import ThreadOperations
from turnkeeper_server.rpc.checkpoint_service import CheckpointServicer, PreparedWrite
from turnkeeper_server.rpc.turn_service import TurnServicer
from turnkeeper_server.security import auth

Ctx = aio.ServicerContext[object, object]
Request = checkpoints_pb2.CheckpointStreamRequest
Response = checkpoints_pb2.CheckpointStreamResponse

_OPS = "get, put, writes or append"
# Messages in one frame's batch: a step's writes (one per task) and its checkpoint.
MAX_BATCH = 256

# Frames read and started ahead of the one being answered, at most.
MAX_AHEAD = 8

# The right each kind of message needs: its unary RPC's (security/auth.py's RIGHTS).
MESSAGE_RIGHTS: dict[str, str] = {
    "get": "/turnkeeper.v1.CheckpointService/GetCheckpoint",
    "put": "/turnkeeper.v1.CheckpointService/PutCheckpoint",
    "writes": "/turnkeeper.v1.CheckpointService/PutWrites",
    "append": "/turnkeeper.v1.TurnService/AppendEvents",
}


class StreamingCheckpointServicer(CheckpointServicer):
    """CheckpointService with its stream; appends go through ``turns``' AppendEvents."""

    def __init__(
        self,
        engine: Engine,
        limits: Limits,
        metrics: Metrics,
        turns: TurnServicer,
        audit: AuditLog | None = None,
        threads: ThreadOperations | None = None,
    ) -> None:
        super().__init__(engine, limits, metrics, audit, threads)
        self.turns = turns
        self.streams = lim.StreamQuota(
            "CheckpointStreams",
            limits.max_checkpoint_streams_per_client,
            "max_checkpoint_streams_per_client",
        )

    async def CheckpointStream(
        self, requests: AsyncIterator[Request], context: Ctx
    ) -> AsyncIterator[Response]:
        with self.streams.hold(auth.client_key(context)):
            state = _Ahead()
            frames: asyncio.Queue[_Frame | None] = asyncio.Queue(MAX_AHEAD)
            reader = asyncio.get_running_loop().create_task(
                self._read_ahead(requests, context, state, frames)
            )
            try:
                while (item := await frames.get()) is not None:
                    answer = await item.finish()
                    state.answered(item)
                    yield answer
            finally:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
                while not frames.empty():
                    if (left := frames.get_nowait()) is not None:
                        left.discard()

    async def _read_ahead(
        self,
        requests: AsyncIterator[Request],
        context: Ctx,
        state: _Ahead,
        frames: asyncio.Queue[_Frame | None],
    ) -> None:
        """Read the stream's frames and start each (its writes queued behind the
        previous frame's) while the frames before it commit; `frames` gives them to
        the answering side in the order they came (decision 490). A frame that could
        see or change what an earlier one's end decides (a read, another run's
        writes on a run's own stream) waits until every earlier frame is answered,
        as every frame did before."""
        try:
            async for frame in requests:
                if state.out and _waits(frame, state):
                    await state.drained()
                item = await self._start(frame, context, state)
                await frames.put(item)
                if item.ends:
                    return
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # the request stream broke: the answers end on it
            await frames.put(_Frame.failed(exc))
            return
        await frames.put(None)

    async def _start(self, frame: Request, context: Ctx, state: _Ahead) -> _Frame:
        """Frame `frame` under way: its checks done and its writes queued."""
        state.begin(frame)
        try:
            if frame.batch:
                return _Frame(frame, await self._batch(frame, context, state))
            return _Frame(frame, [await self._single(frame, context, state)])
        except TurnkeeperError as exc:  # a malformed frame ends the stream, in its turn
            return _Frame.failed(exc)

    async def _single(self, request: Request, context: Ctx, state: _Ahead) -> _Started:
        run = _run_of(request)
        if (cause := state.refusal(run, request)) is not None:
            return _Started(request, _failed(cause), _same)
        task = await self._queue(request, context, followed=False)
        state.note(request, run, task)
        return _Started(request, task, _same)

    async def _answer(self, request: Request, context: Ctx, shared: bool = False) -> Response:
        try:
            response = await self._one(request, context)
        except StaleAttempt as exc:
            if not (shared or request.shared):
                # Ends the stream: ErrorsAndMetrics answers ABORTED with the message.
                raise
            response = _refused(request, exc)
        except TurnkeeperError as exc:
            response = _refused(request, exc)
        response.accepts_batch = True
        return response

    async def _batch(self, frame: Request, context: Ctx, state: _Ahead) -> list[_Started]:
        if frame.id or frame.WhichOneof("op") is not None:
            raise InvalidArgument("a frame carries one message or a batch, not both")
        if len(frame.batch) > MAX_BATCH:
            raise InvalidArgument(
                f"{len(frame.batch)} messages in one frame; the limit is {MAX_BATCH}"
            )
        if any(request.batch for request in frame.batch):
            raise InvalidArgument("a message in a batch cannot carry a batch of its own")
        runs = [_run_of(request) for request in frame.batch]
        if not frame.shared and len(set(runs) - {_READ}) > 1:
            # So that a stale attempt's refusal ends the stream before any write after
            # it is answered, as on a single frame; a shared frame answers it alone.
            raise InvalidArgument(
                "the writes of one batch carry one turn attempt (or none): "
                "send another run's on its own stream, or mark the frame shared"
            )
        started: list[_Started] = []
        # Runs whose append was refused in this frame (or in one still unanswered
        # before it): their later writes are refused too, unwritten (a checkpoint
        # past events that were not appended would break the boundary rule;
        # decision 420).
        n = 0
        while n < len(frame.batch):
            request = frame.batch[n]
            if (cause := state.refusal(runs[n], request)) is not None:
                started.append(_Started(request, _failed(cause), _same))
                n += 1
                continue
            if _is_checkpoint_write(request):
                # The puts and writes in a row: checked, then committed together.
                end = n + 1
                while (
                    end < len(frame.batch)
                    and _is_checkpoint_write(frame.batch[end])
                    and runs[end] not in state.refused
                ):
                    end += 1
                followed = end < len(runs) and runs[end] != _READ
                started += await self._write_row(frame.batch[n:end], runs[n:end], followed, state)
                n = end
                continue
            if started and runs[n] == _READ:
                # A read sees what the messages before it wrote: once committed.
                await asyncio.wait([s.done for s in started])
            followed = n + 1 < len(runs) and runs[n] != _READ and runs[n + 1] != _READ
            queued = await self._queue(request, context, followed)
            started.append(_Started(request, queued, _same))
            state.note(request, runs[n], queued)
            n += 1
        return started

    def _prepare(self, request: Request) -> tuple[PreparedWrite, Callable[[Any], Response]]:
        """A put or writes message checked as its unary call checks it, and its
        answer once committed."""
        op = "put" if request.WhichOneof("op") == "put" else "writes"
        auth.require_right(MESSAGE_RIGHTS[op])
        if op == "put":
            prepared = self.prepare_put(request.put)
            return prepared, lambda last_seq: _answered(
                request, op, self.put_answer(prepared, last_seq)
            )
        prepared = self.prepare_writes(request.writes)
        return prepared, lambda _: _answered(request, op, self.writes_answer(prepared))

    async def _write_row(
        self,
        requests: list[Request],
        runs: list[tuple[str, ...]],
        followed: bool,
        state: _Ahead,
    ) -> list[_Started]:
        """A row of puts and writes checked one by one as their unary calls check
        them, then committed together in the batch's order (`write_batch`: the
        engine decides how). Each is answered or refused on its own; `followed`: a
        write comes right after the row. A turn attempt's write refused by its
        checks refuses its run's writes after it, as a refused append does: the
        bridge sends a run's first step behind its input checkpoint unanswered
        (decision 530)."""
        started: list[_Started | None] = []
        ready: list[tuple[Request, PreparedWrite, Callable[[Any], Response]]] = []
        for request, run in zip(requests, runs, strict=True):
            if (cause := state.refusal(run, request)) is not None:
                started.append(_Started(request, _failed(cause), _same))
                continue
            try:
                prepared, answer = self._prepare(request)
                ready.append((request, prepared, answer))
                started.append(None)
            except TurnkeeperError as exc:  # answered in its turn, as a failed commit
                started.append(_Started(request, _failed(exc), _same))
                state.refuse(run, request, str(exc))
        done = await self.engine.checkpoints.write_batch(
            [prepared.write for _, prepared, _ in ready], followed=followed
        )
        committed = iter(zip(ready, done, strict=True))
        filled: list[_Started] = []
        for item in started:
            if item is None:
                (request, _, answer), future = next(committed)
                item = _Started(request, future, answer)
            filled.append(item)
        return filled

    async def _queue(
        self, request: Request, context: Ctx, followed: bool
    ) -> asyncio.Task[Response]:
        """Start handling `request`; return once its write is queued behind the
        previous message's (or, where the store does not say so, once it is done)."""
        run, queued = self.engine.pipelined(followed=followed)
        task = asyncio.get_running_loop().create_task(self._answer(request, context), context=run)

        def done(_: object) -> None:
            if not queued.done():
                queued.set_result(None)

        task.add_done_callback(done)
        # Its outcome is taken by its frame's answer, or dropped if the stream ends
        # before (a frame read ahead of one that ended it): no "never retrieved".
        task.add_done_callback(_taken)
        await queued
        return task

    async def _one(self, request: Request, context: Ctx) -> Response:
        op = request.WhichOneof("op")
        if op is not None:
            auth.require_right(MESSAGE_RIGHTS[op])
        if op == "get":
            return Response(id=request.id, get=await self.GetCheckpoint(request.get, context))
        if op == "put":
            return Response(id=request.id, put=await self.PutCheckpoint(request.put, context))
        if op == "writes":
            return Response(id=request.id, writes=await self.PutWrites(request.writes, context))
        if op == "append":
            appended = await self.turns.AppendEvents(request.append, context)
            return Response(id=request.id, append=appended)
        raise InvalidArgument(
            f"a stream message carries one of {_OPS}; message {request.id} has none"
        )


_READ = ("read",)


def _frame_runs(frame: Request) -> set[tuple[str, ...]]:
    return {_run_of(request) for request in (frame.batch or (frame,))}


def _waits(frame: Request, state: _Ahead) -> bool:
    """Whether `frame` must wait for every frame before it to be answered: it reads
    (what they write must be committed first), or, on a run's own stream, its writes
    are another run's than theirs (a stale attempt there ends the stream before
    anything after it is taken)."""
    runs = _frame_runs(frame)
    if _READ in runs:
        return True
    return not frame.shared and len(runs | state.runs_out()) > 1


class _Ahead:
    """A stream's frames started and not answered yet, and the runs whose append
    was refused in one of them."""

    def __init__(self) -> None:
        self.out: list[tuple[Request, set[tuple[str, ...]]]] = []
        self.current: Request | None = None
        self.refused: dict[tuple[str, ...], tuple[Request, int, str]] = {}
        self._drained = asyncio.Event()
        self._drained.set()

    def runs_out(self) -> set[tuple[str, ...]]:
        return set().union(*(runs for _, runs in self.out))

    def begin(self, frame: Request) -> None:
        self.current = frame
        self.out.append((frame, _frame_runs(frame)))
        self._drained.clear()

    def answered(self, item: _Frame) -> None:
        """`item`'s answer goes out: what it refused no longer refuses what follows
        (the client learns of it with this answer, as it did before)."""
        self.out = [(frame, runs) for frame, runs in self.out if frame is not item.frame]
        self.refused = {run: why for run, why in self.refused.items() if why[0] is not item.frame}
        if not self.out:
            self._drained.set()

    async def drained(self) -> None:
        await self._drained.wait()

    def note(self, request: Request, run: tuple[str, ...], task: asyncio.Future[Any]) -> None:
        """After `request` is queued: if its checks refused it, its run's later
        writes are refused too (an append's, or a turn attempt's put or writes)."""
        if run == _READ or not isinstance(task, asyncio.Task):
            return
        if request.WhichOneof("op") != "append" and run == ("", ""):
            return  # an unfenced write is refused alone
        if (why := _refusal(task)) is not None and self.current is not None:
            self.refused.setdefault(run, (self.current, request.id, why))

    def refuse(self, run: tuple[str, ...], request: Request, why: str) -> None:
        """`request`, a turn attempt's write, was refused by its checks: its run's
        later writes are refused too (an unfenced write is refused alone)."""
        if run != ("", "") and self.current is not None:
            self.refused.setdefault(run, (self.current, request.id, why))

    def refusal(self, run: tuple[str, ...], request: Request) -> InvalidArgument | None:
        if (refused := self.refused.get(run)) is None:
            return None
        frame, message, why = refused
        where = "in this frame" if frame is self.current else "on this stream, unanswered,"
        return InvalidArgument(
            f"not written: message {message} before it {where} was refused ({why})"
        )


class _Frame:
    """A frame under way: its messages started in its order, answered in it."""

    def __init__(
        self,
        frame: Request,
        started: list[_Started],
        error: BaseException | None = None,
    ) -> None:
        self.frame = frame
        self.started = started
        self.error = error
        self.ends = error is not None

    @classmethod
    def failed(cls, exc: BaseException) -> _Frame:
        return cls(Request(), [], exc)

    async def finish(self) -> Response:
        """The frame's answer once all its messages are committed; raises what ends
        the stream."""
        if self.error is not None:
            raise self.error
        if not self.frame.batch:
            [item] = self.started
            return item.answer(await item.done)
        answers: list[Response] = []
        ending: BaseException | None = None
        # In the batch's order, every outcome taken: what ends the stream is the first.
        for item in self.started:
            try:
                answers.append(item.answer(await item.done))
            except StaleAttempt as exc:
                if self.frame.shared:
                    answers.append(_refused(item.request, exc))
                else:
                    ending = ending or exc
            except TurnkeeperError as exc:
                answers.append(_refused(item.request, exc))
            except Exception as exc:
                ending = ending or exc
        if ending is not None:
            raise ending
        return Response(batch=answers, accepts_batch=True)

    def discard(self) -> None:
        """The stream ended before this frame's answer: its outcomes are taken and
        dropped (its writes are under way, each fenced as it would be)."""
        for item in self.started:
            item.done.add_done_callback(_taken)


def _taken(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


class _Started(NamedTuple):
    """A message of a batch under way: what to await, and its answer from that."""

    request: Request
    done: asyncio.Future[Any]
    answer: Callable[[Any], Response]


def _same(response: Response) -> Response:
    return response


def _refusal(task: asyncio.Task[Response]) -> str | None:
    """The message of a refusal `task` already answered (its checks refused it
    before its write was queued), else None."""
    if not task.done() or task.cancelled() or task.exception() is not None:
        return None
    answer = task.result()
    return answer.error.message if answer.HasField("error") else None


def _failed(exc: TurnkeeperError) -> asyncio.Future[Response]:
    future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future


def _is_checkpoint_write(request: Request) -> bool:
    return request.WhichOneof("op") in ("put", "writes")


def _answered(request: Request, op: str, body: Any) -> Response:
    """The answer to a committed message: `body` in its field `op`."""
    response = Response(id=request.id, accepts_batch=True)
    getattr(response, op).CopyFrom(body)
    return response


def _refused(request: Request, exc: TurnkeeperError) -> Response:
    """The answer to a message refused on its own (the stream goes on)."""
    code, message = status_for(exc)
    return Response(
        id=request.id,
        error=checkpoints_pb2.StreamError(code=code.value[0], message=message),
        accepts_batch=True,
    )


def _run_of(request: Request) -> tuple[str, ...]:
    """The turn attempt a message writes for ("", "") for none; reads are `_READ`."""
    op = request.WhichOneof("op")
    if op == "append":
        return (request.append.turn_id, str(request.append.attempt))
    if op in ("put", "writes"):
        write = request.put if op == "put" else request.writes
        if write.HasField("fence"):
            return (write.fence.turn_id, str(write.fence.attempt))
        return ("", "")
    return _READ
