"""CheckpointStream: one graph run's gets, puts, writes and event appends on one
open bidirectional stream.

Each message is handled by the very servicer method its unary RPC runs (same
validation, same authorization checks, same Engine call), after the check of the
caller's right to that RPC, so the stream behaves
like the unary calls on any store backend and costs the service one stream's
set-up instead of grpc's per-call machinery for every step.

Messages are handled in the order they arrive, and each answer is sent after its
commit: events appended before a checkpoint on the same stream are committed
before it, which is the boundary rule by construction. A fenced message (a stale
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
after it in the same batch, unwritten: they were sent behind it without waiting
for its answer (decision 420), and a checkpoint must not record events that were
not appended.

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
            async for frame in requests:
                if frame.batch:
                    answers = await self._batch(frame, context)
                    yield Response(batch=answers, accepts_batch=True)
                else:
                    yield await self._answer(frame, context, frame.shared)

    async def _answer(self, request: Request, context: Ctx, shared: bool = False) -> Response:
        try:
            response = await self._one(request, context)
        except StaleAttempt as exc:
            if not shared:
                # Ends the stream: ErrorsAndMetrics answers ABORTED with the message.
                raise
            response = _refused(request, exc)
        except TurnkeeperError as exc:
            response = _refused(request, exc)
        response.accepts_batch = True
        return response

    async def _batch(self, frame: Request, context: Ctx) -> list[Response]:
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
        # Runs whose append was refused in this frame: their later writes in it are
        # refused too, unwritten (a checkpoint past events that were not appended
        # would break the boundary rule; decision 420).
        refused: dict[tuple[str, ...], InvalidArgument] = {}
        n = 0
        while n < len(frame.batch):
            request = frame.batch[n]
            if (cause := refused.get(runs[n])) is not None:
                started.append(_Started(request, _failed(cause), _same))
                n += 1
                continue
            if _is_checkpoint_write(request):
                # The puts and writes in a row: checked, then committed together.
                end = n + 1
                while (
                    end < len(frame.batch)
                    and _is_checkpoint_write(frame.batch[end])
                    and runs[end] not in refused
                ):
                    end += 1
                followed = end < len(runs) and runs[end] != _READ
                started += await self._write_row(frame.batch[n:end], followed)
                n = end
                continue
            if started and runs[n] == _READ:
                # A read sees what the messages before it wrote: once committed.
                await asyncio.wait([s.done for s in started])
            followed = n + 1 < len(runs) and runs[n] != _READ and runs[n + 1] != _READ
            queued = await self._queue(request, context, followed)
            started.append(_Started(request, queued, _same))
            if (why := _refusal(queued)) is not None and runs[n] != _READ:
                refused[runs[n]] = InvalidArgument(
                    f"not written: message {request.id} before it in this frame was refused ({why})"
                )
            n += 1
        answers: list[Response] = []
        ending: BaseException | None = None
        # In the batch's order, every outcome taken: what ends the stream is the first.
        for item in started:
            try:
                answers.append(item.answer(await item.done))
            except StaleAttempt as exc:
                if frame.shared:
                    answers.append(_refused(item.request, exc))
                else:
                    ending = ending or exc
            except TurnkeeperError as exc:
                answers.append(_refused(item.request, exc))
            except Exception as exc:
                ending = ending or exc
        if ending is not None:
            raise ending
        return answers

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

    async def _write_row(self, requests: list[Request], followed: bool) -> list[_Started]:
        """A row of puts and writes checked one by one as their unary calls check
        them, then committed together in the batch's order (`write_batch`: the
        engine decides how). Each is answered or refused on its own; `followed`: a
        write comes right after the row."""
        started: list[_Started | None] = []
        ready: list[tuple[Request, PreparedWrite, Callable[[Any], Response]]] = []
        for request in requests:
            try:
                prepared, answer = self._prepare(request)
                ready.append((request, prepared, answer))
                started.append(None)
            except TurnkeeperError as exc:  # answered in its turn, as a failed commit
                started.append(_Started(request, _failed(exc), _same))
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
