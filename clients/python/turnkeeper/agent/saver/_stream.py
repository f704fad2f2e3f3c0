"""RemoteSaver's checkpoint stream: one open ``CheckpointStream`` per graph run.

A run's gets, puts, writes and (through the bridge) event appends go as messages
on one bidirectional stream instead of one unary call each: the service's cost per
message is a fraction of a unary call's, and a step waits on one frame each way.
A run is the (turn_id, attempt) its config carries, or else its thread.

What holds, as on the unary path:

- an answer comes after the commit: a put, a write or an append returns only when
  the service answered that message, and it answers after committing it;
- order: the service handles a stream's messages one at a time in the order they
  were sent, so events flushed before a checkpoint are committed before it;
- fencing: a stale attempt's message ends the stream with ABORTED, and every
  message waiting on it fails with ``StaleAttempt``;
- batching: messages asked for in the same turn of the event loop (a graph step's
  writes and its checkpoint: LangGraph hands them over together), and those asked
  for while a frame is out, go in one frame once the service has said it takes
  batches on this stream; each is still answered on its own, after its commit;
- a broken stream (the service restarted, the connection dropped) is opened again,
  up to ``options.retry_max_attempts`` times with the retry backoff, and every
  message not answered yet is sent again, in order. All four operations are
  idempotent (the same argument as for their unary retries in
  :mod:`turnkeeper._connection`), so a message the service had committed before the
  break is a no-op the second time, and a message already answered is never sent
  again.

Each operation (its write included) is bounded by ``options.default_timeout``, like a
unary call's deadline, extended while the service is slow but answering (issue 51,
decision 385): when the deadline passes and the service answered this process within
it (a heartbeat of the bridge's lease thread, another message on a stream: see
:func:`heard_from`), the operation waits another ``default_timeout``, up to
:data:`MAX_EXTENSIONS` times; a service that answered nothing in that time (gone,
frozen, cut off) fails it as before. Streams idle for :data:`IDLE_SECONDS` are closed when the
saver is next used (and a bridge's run's stream when the run ends).

The blocking saver's streams run on a private event loop in one daemon thread
(:class:`LoopStreams`): grpc's blocking API would take a thread per stream to feed
its request iterator, and the two behave alike this way.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, Generic, TypeVar

import grpc
import grpc.aio
from langchain_core.runnables import RunnableConfig

from turnkeeper._connection import ConnectionOptions
from turnkeeper.agent.saver._identity import turn_identity
from turnkeeper.client import AsyncTurnkeeperClient, cancelled_under
from turnkeeper.errors import TurnkeeperError, Unavailable, from_rpc_error, from_status
from turnkeeper.v1 import checkpoints_pb2

log = logging.getLogger(__name__)

Request = checkpoints_pb2.CheckpointStreamRequest
Response = checkpoints_pb2.CheckpointStreamResponse
RunKey = tuple[str, str, int]

# A stream no message used for this long is closed (a run between steps waits on
# a model call; one longer than this opens a new stream, which is cheap).
IDLE_SECONDS: Final = 30.0
# Open streams per saver and event loop; past it the least recently used idle go.
MAX_STREAMS: Final = 64
# Streams of ended runs kept open for the next ones, per saver and event loop.
MAX_SPARE: Final = 16
# How a stream ends when it broke rather than refused: opened again. INTERNAL is
# among them because grpc reports a connection cut in the middle of a frame as
# INTERNAL, not UNAVAILABLE; every message is idempotent and the breaks are
# bounded, so a service that answers INTERNAL itself only gets the message again
# a few times, and its INTERNAL is what the caller then gets.
_BROKEN: Final = frozenset(
    {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL}
)
_RPC: Final = "CheckpointStream"
# Messages in one frame at most: the service refuses a larger batch whole.
MAX_FRAME: Final = 256
# How many more deadlines an operation waits for its answer while the service keeps
# answering other calls (a saturated machine, not a lost service): 30 s becomes at
# most five minutes, and the turn's own deadlines (max run time) still apply.
MAX_EXTENSIONS: Final = 10

# When each service target last answered this process (monotonic): the lease
# thread's heartbeats and the streams' answers say it.
_heard: dict[str, float] = {}


def heard_from(target: str) -> None:
    """The service at `target` answered a call just now (any thread)."""
    _heard[target] = time.monotonic()


def heard_within(target: str, seconds: float) -> bool:
    """Whether the service at `target` answered anything in the last `seconds`."""
    return time.monotonic() - _heard.get(target, float("-inf")) <= seconds


_CODES: Final = {code.value[0]: code for code in grpc.StatusCode}


def run_key(config: RunnableConfig) -> RunKey:
    """The stream a config's operations go on: its turn attempt, else its thread."""
    identity = turn_identity(config)
    if identity is not None:
        return turn_key(identity.turn_id, identity.attempt)
    configurable = config.get("configurable") or {}
    return ("thread", str(configurable.get("thread_id", "")), 0)


def turn_key(turn_id: str, attempt: int) -> RunKey:
    return ("turn", turn_id, attempt)


# The key of a shared stream: every run's (RunStreams with `shared`).
SHARED_KEY: Final[RunKey] = ("shared", "", 0)


def _answer(response: Response) -> Response:
    if response.HasField("error"):
        code = _CODES.get(response.error.code, grpc.StatusCode.UNKNOWN)
        raise from_status(code, response.error.message, rpc=_RPC)
    return response


def _backoff(options: ConnectionOptions, attempt: int) -> float:
    return float(min(options.retry_initial_backoff * 2 ** (attempt - 1), options.retry_max_backoff))


class _Timer:
    """The current handle of a deadline that may be extended (`_expiry`)."""

    handle: asyncio.TimerHandle | None = None

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()


class AsyncRunStream:
    """One run's stream on one event loop (or, `shared`, every run's on that loop);
    ops from several tasks are pipelined."""

    def __init__(self, client: AsyncTurnkeeperClient, shared: bool = False) -> None:
        self._client = client
        # Every frame says so: the service then takes several runs' messages in one
        # batch and answers a stale attempt's alone instead of ending the stream.
        self._shared = shared
        self._options = client.options
        self._ids = itertools.count(1)
        # Sent (or about to be) and not answered, in send order.
        self._pending: dict[int, tuple[Request, asyncio.Future[Response]]] = {}
        # The call each pending message was last written on: a message that a
        # reconnect (or the opening of the call) already sent is not written twice.
        self._sent_on: dict[int, object] = {}
        self._call: grpc.aio.StreamStreamCall[Request, Response] | None = None
        # The call whose service said it takes batches (a call after a reconnect may
        # reach another replica): frames of several messages go on it alone.
        self._batching: object = None
        # Asked for and not written yet, for the next frame (batching calls only).
        self._unsent: list[Request] = []
        self._flushing = False
        self._flusher: asyncio.Task[None] | None = None  # held: the loop keeps weak refs
        # Frames written on the current call and not answered yet (the service answers
        # each frame with one). A stream holds its next frame while one is out: the
        # service reads a stream's frames one at a time anyway, so waiting costs no
        # commit there, and what is asked for meanwhile joins it (the other runs' on
        # a shared stream; on a run's own, a step's events, writes and checkpoint
        # behind its tokens' append: one commit, decision 421).
        self._in_flight = 0
        self._writing = asyncio.Lock()
        self._reader: asyncio.Task[None] | None = None
        self._closed = False
        self.last_used = time.monotonic()

    @property
    def idle(self) -> bool:
        return not self._pending

    async def request(self, **op: Any) -> Response:
        if self._closed:
            raise RuntimeError("the checkpoint stream is closed")
        self.last_used = time.monotonic()
        request = Request(id=next(self._ids), shared=self._shared, **op)
        future: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._pending[request.id] = (request, future)
        timeout = self._options.default_timeout
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        try:
            if self._call is not None and self._batching is self._call:
                # Nothing to wait for: the message joins the next frame.
                self._unsent.append(request)
                self._schedule_flush()
            else:
                # The deadline covers the write too: a write waits while the
                # connection is being made, or while the service reads nothing.
                async with self._writing_within(deadline):
                    if self._call is None:
                        self._call = self._client.open_checkpoint_stream()
                        self._in_flight = 0
                        self._reader = asyncio.create_task(self._read(self._call))
                        await self._send_pending(self._call)
                    elif self._sent_on.get(request.id) is not self._call:
                        await self._write(self._call, request)
            return _answer(await self._answer_of(future, deadline))
        except TimeoutError:
            # The stream is stuck (or the write was cut short): it counts as broken,
            # and the reader sends what else is waiting on a new one.
            if self._call is not None:
                self._call.cancel()
            raise TurnkeeperError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no answer on the checkpoint stream within {timeout} s",
                rpc=_RPC,
            ) from None
        finally:
            # Answered, failed, timed out or cancelled: never sent again.
            self._pending.pop(request.id, None)
            self._sent_on.pop(request.id, None)

    def _answer_of(
        self, future: asyncio.Future[Response], deadline: float | None
    ) -> asyncio.Future[Response]:
        """``future``, failed with TimeoutError at ``deadline`` unless answered by
        then (extended as `_expiry` says). One timer per message instead of a
        timeout scope and a shield (decision 522)."""
        if deadline is None or self._options.default_timeout is None:
            return future

        def fail() -> None:
            if not future.done():
                future.set_exception(TimeoutError())

        timer = self._expiry(deadline, fail, done=future.done)
        future.add_done_callback(lambda _: timer.cancel())
        return future

    @contextlib.asynccontextmanager
    async def _writing_within(self, deadline: float | None) -> AsyncIterator[None]:
        """The write lock, held by a message's write up to ``deadline`` (extended as
        `_expiry` says): TimeoutError out of the block when it passes."""
        async with asyncio.timeout(None) as scope:
            timer = None
            if deadline is not None and self._options.default_timeout is not None:
                loop = asyncio.get_running_loop()
                timer = self._expiry(deadline, lambda: scope.reschedule(loop.time()))
            try:
                async with self._writing:
                    yield
            finally:
                if timer is not None:
                    timer.cancel()

    def _expiry(
        self, deadline: float, fail: Callable[[], None], done: Callable[[], bool] | None = None
    ) -> _Timer:
        """A timer that calls ``fail`` at ``deadline``, unless the service answered
        this process within the last ``default_timeout`` (slow, not gone: decision
        385): then the deadline passes ``default_timeout`` later, up to
        MAX_EXTENSIONS times. ``done``: whether what it bounds is over already (an
        answer whose callbacks have not run yet); a write's timer is cancelled as
        the write ends, so it has none."""
        timeout = self._options.default_timeout
        assert timeout is not None
        loop = asyncio.get_running_loop()
        target = self._options.target
        timer = _Timer()
        extensions = 0

        def expire() -> None:
            nonlocal extensions
            if done is not None and done():
                return
            if extensions < MAX_EXTENSIONS and heard_within(target, timeout):
                # Slow, not gone: it answered something within the deadline.
                extensions += 1
                log.warning(
                    "no answer on the checkpoint stream within %g s, but the service "
                    "at %s answers other calls: waiting %g s more (%d of %d)",
                    timeout,
                    target,
                    timeout,
                    extensions,
                    MAX_EXTENSIONS,
                )
                timer.handle = loop.call_at(loop.time() + timeout, expire)
                return
            fail()

        timer.handle = loop.call_at(deadline, expire)
        return timer

    def _schedule_flush(self) -> None:
        """Write what is unsent on the loop's next turn, after the other messages asked
        for on this one (they share its frame); not while a frame is out (the reader
        calls this again once it is answered)."""
        if self._flushing or not self._unsent or self._in_flight:
            return
        self._flushing = True
        self._flusher = asyncio.get_running_loop().create_task(self._flush())

    async def _write(self, call: grpc.aio.StreamStreamCall[Request, Response], r: Request) -> None:
        # The call may have ended under us; the reader sees why and sends the pending
        # messages (this one included) again on a new stream, or fails them.
        self._sent_on[r.id] = call
        self._in_flight += 1
        with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
            await call.write(r)

    async def _flush(self) -> None:
        async with self._writing:
            self._flushing = False
            if self._in_flight:
                return  # a frame went out meanwhile: the reader flushes on its answer
            unsent, self._unsent = self._unsent, []
            call = self._call
            if call is None:
                return  # the reader sends every pending message on the next call
            todo = [
                r for r in unsent if r.id in self._pending and self._sent_on.get(r.id) is not call
            ]
            # The service refuses a frame of more than MAX_FRAME messages whole.
            for start in range(0, len(todo), MAX_FRAME):
                frame = todo[start : start + MAX_FRAME]
                if len(frame) == 1:
                    await self._write(call, frame[0])
                    continue
                for r in frame:
                    self._sent_on[r.id] = call
                self._in_flight += 1
                with contextlib.suppress(grpc.RpcError, asyncio.InvalidStateError):
                    await call.write(Request(batch=frame, shared=self._shared))

    async def _send_pending(self, call: grpc.aio.StreamStreamCall[Request, Response]) -> None:
        for request, _ in list(self._pending.values()):
            await self._write(call, request)

    async def _read(self, call: grpc.aio.StreamStreamCall[Request, Response]) -> None:
        breaks = 0
        while True:
            error: grpc.RpcError | None = None
            code: grpc.StatusCode | None
            try:
                async for response in call:
                    breaks = 0
                    heard_from(self._options.target)
                    if response.accepts_batch:
                        self._batching = call
                    for answer in response.batch or (response,):
                        entry = self._pending.get(answer.id)
                        if entry is not None and not entry[1].done():
                            entry[1].set_result(answer)
                    if call is self._call:
                        self._in_flight = max(0, self._in_flight - 1)
                        self._schedule_flush()
                code = grpc.StatusCode.OK
            except grpc.RpcError as err:
                error = err
                code = err.code() if callable(getattr(err, "code", None)) else None
            except asyncio.CancelledError:
                # A write cancelled with its task (a run the bridge stopped) or
                # `request`'s deadline cancels the call: a break, not the end of this
                # reader, unless the reader itself is cancelled (decision 720).
                if not cancelled_under(call):
                    raise
                code = grpc.StatusCode.CANCELLED
            if self._closed:
                self._fail(RuntimeError("the checkpoint stream is closed"))
                return
            broken = code == grpc.StatusCode.OK or code in _BROKEN
            if not broken and error is not None:
                self._call = None
                self._fail(from_rpc_error(error, rpc=_RPC))
                return
            if not self._pending:
                self._call = None
                return
            breaks += 1
            if breaks > self._options.retry_max_attempts:
                self._call = None
                cause = from_rpc_error(error, rpc=_RPC) if error is not None else None
                if cause is not None and code == grpc.StatusCode.INTERNAL:
                    self._fail(cause)
                    return
                self._fail(
                    Unavailable(
                        grpc.StatusCode.UNAVAILABLE,
                        f"the checkpoint stream broke {breaks} times in a row"
                        + (f": {cause.message}" if cause is not None else ""),
                        rpc=_RPC,
                    )
                )
                return
            await asyncio.sleep(_backoff(self._options, breaks))
            async with self._writing:
                if self._closed:
                    continue
                call = self._call = self._client.open_checkpoint_stream()
                self._in_flight = 0
                await self._send_pending(call)

    def _fail(self, exc: BaseException) -> None:
        for _, future in list(self._pending.values()):
            if not future.done():
                future.set_exception(exc)

    def close(self) -> None:
        self._closed = True
        if self._call is not None:
            self._call.cancel()

    async def wait_closed(self) -> None:
        """After :meth:`close`: until the reader has seen the call end, so that
        nothing of the call is left for grpc to deliver to this event loop."""
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


_S = TypeVar("_S", bound=AsyncRunStream)


class RunStreams(Generic[_S]):
    """The open streams of one saver (on one event loop, for the async kind).

    A run keeps its stream while it has a message unanswered: that is all the order
    of its messages needs, since one answered was committed. A run that asks for
    its first message (or its next, after another took its stream) is given the
    least recently used stream with nothing unanswered, if any, so a new run does
    not pay for opening a stream, which costs about what a unary call does. So one
    stream carries one run's messages at a time, and a batch one run's.

    `shared`: every run's messages go on one stream (made with its `shared` flag),
    whose batches then carry a step of several runs: fewer frames each way when
    runs overlap (decision 155). Ending a run leaves it open.
    """

    def __init__(self, make: Callable[[], _S], shared: bool = False) -> None:
        self._make: Callable[[], _S] = make
        self._shared = shared
        self._streams: dict[RunKey, _S] = {}
        # Streams of runs that ended (drop), kept open for the next runs.
        self._spare: list[_S] = []
        self._lock = threading.Lock()
        self._swept = time.monotonic()

    def get(self, key: RunKey) -> _S:
        if self._shared:
            key = SHARED_KEY
        with self._lock:
            stream = self._streams.get(key)
            if stream is None:
                self._sweep()
                stream = self._streams[key] = self._reuse() or self._make()
            return stream

    def _reuse(self) -> _S | None:
        if self._spare:
            return self._spare.pop()
        idle = [(s.last_used, k) for k, s in self._streams.items() if s.idle]
        if not idle:
            return None
        _, key = min(idle)
        return self._streams.pop(key)

    def _sweep(self) -> None:
        now = time.monotonic()
        if now - self._swept < IDLE_SECONDS / 2 and len(self._streams) < MAX_STREAMS:
            return
        self._swept = now
        for stream in [s for s in self._spare if now - s.last_used > IDLE_SECONDS]:
            self._spare.remove(stream)
            stream.close()
        by_age = sorted(self._streams.items(), key=lambda item: item[1].last_used)
        excess = len(by_age) - MAX_STREAMS + 1
        for key, stream in by_age:
            if stream.idle and (now - stream.last_used > IDLE_SECONDS or excess > 0):
                excess -= 1
                stream.close()
                del self._streams[key]

    def drop(self, key: RunKey) -> None:
        """The run of `key` ended: its stream waits, open, for the next run (a few
        are kept; the rest are closed)."""
        if self._shared:
            return  # the one stream goes on carrying the other runs'
        with self._lock:
            stream = self._streams.pop(key, None)
            if stream is not None and stream.idle and len(self._spare) < MAX_SPARE:
                self._spare.append(stream)
                return
        if stream is not None:
            stream.close()

    def _take_all(self) -> list[_S]:
        with self._lock:
            streams = [*self._streams.values(), *self._spare]
            self._streams, self._spare = {}, []
        return streams

    def close(self) -> None:
        for stream in self._take_all():
            stream.close()

    async def aclose(self) -> None:
        """Close every stream and wait for their readers (on the streams' loop)."""
        streams = self._take_all()
        for stream in streams:
            stream.close()
        await asyncio.gather(*(stream.wait_closed() for stream in streams))


class LoopStreams:
    """The blocking saver's streams: :class:`AsyncRunStream` on a private event loop
    in a daemon thread, which every blocking caller hands its message to."""

    def __init__(self, options: ConnectionOptions, shared: bool = False) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="turnkeeper-saver-streams", daemon=True
        )
        self._thread.start()
        self._client = AsyncTurnkeeperClient(options)
        self._streams: RunStreams[AsyncRunStream] = RunStreams(
            lambda: AsyncRunStream(self._client, shared), shared
        )

    def request(self, key: RunKey, **op: Any) -> Response:
        # The caller's context goes with the message (its trace, for one): a stream
        # opened for it is a child of the caller's span, as a unary call would be.
        context = contextvars.copy_context()
        answer: concurrent.futures.Future[Response] = concurrent.futures.Future()

        def settle(task: asyncio.Task[Response]) -> None:
            if task.cancelled():
                answer.cancel()
            elif (exc := task.exception()) is not None:
                answer.set_exception(exc)
            else:
                answer.set_result(task.result())

        def start() -> None:
            task = self._loop.create_task(self._request(key, op), context=context)
            task.add_done_callback(settle)

        self._loop.call_soon_threadsafe(start)
        return answer.result()

    async def _request(self, key: RunKey, op: dict[str, Any]) -> Response:
        return await self._streams.get(key).request(**op)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        done = asyncio.run_coroutine_threadsafe(self._aclose(), self._loop)
        with contextlib.suppress(Exception):
            done.result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()

    async def _aclose(self) -> None:
        await self._streams.aclose()
        await self._client.close()
