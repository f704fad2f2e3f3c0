"""A turn's event log on the executor side: the events a graph run emits
(:mod:`turnkeeper.agent.bridge._capture`) get contiguous ``seq``, are buffered and
appended to the service.

Events are captured when the graph emits them, not when a consumer of
``astream`` gets round to reading them. That matters for the boundary rule
(docs/architecture.md §3): with ``durability="sync"`` LangGraph writes a step's checkpoint
(``aput``) before ``astream`` has handed out that step's last chunks (its
``updates`` chunk, and for a node run in a thread all of its tokens), so a
consumer-side converter would append them after the checkpoint and a re-drive's
rewind to that checkpoint would drop them for good. LangChain callbacks run inside
the node as it works, so by the time LangGraph saves the node's writes, every event
of the node is in the :class:`EventLog`, which the saver flushes first
(:mod:`turnkeeper.agent.bridge._boundary`).

What the events are, and how a graph run's callbacks and stream become them:
:mod:`turnkeeper.agent.bridge._capture`.

The service writes events into the stream too: a turn's checkpoint may carry the
announcement of an effect superseded (``effect.superseded``, docs/effects.md), at
the seqs after the last one appended. So a checkpoint is stored through
:meth:`EventLog.checkpoint`, which appends nothing while the checkpoint is under way
and then numbers the events still buffered after the turn's ``last_seq`` the
service answered: the two writers share one numbering, and neither takes a seq the
other wrote (decision 271).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Final, TypeVar

from turnkeeper.agent.bridge._convert import dumps
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import StaleAttempt, TurnkeeperError, TurnNotFound, WrongState
from turnkeeper.v1 import turns_pb2

log = logging.getLogger(__name__)

# The service refuses an event over 256 KiB and a batch over 1000 events; stay under.
MAX_EVENT_BYTES: Final = 192 * 1024
MAX_BATCH: Final = 500

Append = Callable[[turns_pb2.AppendEventsRequest], Awaitable[turns_pb2.AppendEventsResponse]]
T = TypeVar("T")

# Errors after which an execution must stop: its attempt is no longer the turn's.
FENCED: Final = (StaleAttempt, WrongState, TurnNotFound)

# Events that do not wake the flusher on the saver's stream: a node's `step`, emitted
# as the node ends, goes with the node's writes, and a `values`, emitted right before
# its checkpoint, with that checkpoint; so a step is one frame (decision 771).
WITH_A_WRITE: Final = frozenset({"step", "values"})

# How long a task's writes put off for their step's checkpoint (decision 771) wait
# for it at most before they are sent alone: a step of one task sends its checkpoint a
# few turns of the loop after the writes, while a task that ended beside a sibling
# still running would otherwise have its writes unstored until the sibling ends
# (decision 772).
WRITES_HELD_SECONDS: Final = 0.05


class EventLog:
    """The events of one execution (one attempt) of a turn.

    :meth:`emit` may be called from any thread (a sync node runs in a worker
    thread) and never blocks on I/O: it numbers the event and buffers it. Appends
    happen in :meth:`flush`, one batch at a time, in seq order; a background
    flusher (:meth:`run`) keeps watchers live between checkpoints.
    """

    def __init__(
        self, client: AsyncTurnkeeperClient, turn_id: str, attempt: int, last_seq: int
    ) -> None:
        self.client = client
        self.turn_id = turn_id
        self.attempt = attempt
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._pending: list[turns_pb2.EventInput] = []
        self._next_seq = last_seq + 1
        # The turn's last_seq when this execution began, and the newest seq the
        # service has confirmed since (its own events' included: `checkpoint`).
        self.start_seq = last_seq
        self.appended_seq = last_seq
        self._closed = False
        # The event types this execution emitted (what the runtime asks before it
        # journals a state the saver may already have).
        self.emitted: set[str] = set()
        self._flushing = asyncio.Lock()
        self._wake = asyncio.Event()
        self._append: Append = client.append_events
        # Through the saver's stream (send_through), appends are pipelined: sent
        # without waiting for the answer to the one before, and a checkpoint's or a
        # task's writes go in the same frame as the events before them (decision
        # 420). The newest seq sent, and the appends sent and not answered yet.
        self._ordered = False
        self._sent_seq = last_seq
        self._inflight: set[asyncio.Task[None]] = set()
        # A checkpoint put off (`checkpoint_later`): not sent yet, it goes first in
        # the next frame; sent, its answer is checked by the next boundary, a read,
        # an effect or the run's end (`settle`). Decision 530. A task's writes put
        # off (`write_with_step`) go there too, behind the events up to their seq
        # (decision 771); None: behind nothing more.
        self._later: list[tuple[int | None, Callable[[], Awaitable[None]]]] = []
        self._unchecked: list[asyncio.Task[None]] = []
        # The bound on how long writes put off wait for their step (decision 772).
        self._held: asyncio.TimerHandle | None = None

    def send_through(self, append: Append) -> None:
        """Append through ``append`` instead of the client's unary AppendEvents (the
        saver's stream of this run, which then carries events and checkpoints in
        the order they were written)."""
        self._append = append
        # The stream handles its messages one at a time in the order they were
        # sent, each committed before the next: order needs no wait for answers.
        self._ordered = True

    @property
    def last_seq(self) -> int:
        """The seq of the newest event emitted (appended or not)."""
        with self._lock:
            return self._next_seq - 1

    def emit(self, type_: str, data: Any, *, plain: bool = False) -> None:
        """Buffer an event; ``plain``: ``data`` is JSON as :func:`dumps` says (its
        parts made by ``to_jsonable`` at their depth in ``data``), not converted again."""
        text = _bounded(dumps(data, plain=plain))
        with self._lock:
            if self._closed:
                log.debug("turn_id=%s: %s event after close dropped", self.turn_id, type_)
                return
            seq = self._next_seq
            self._next_seq += 1
            self._pending.append(turns_pb2.EventInput(seq=seq, type=type_, data_json=text))
            self.emitted.add(type_)
        if not (self._ordered and type_ in WITH_A_WRITE):
            self._notify()

    def _notify(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._wake.set()
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    async def flush(self) -> int:
        """Append every event emitted so far; returns the newest seq appended.
        Raises what AppendEvents raised; the events stay buffered, and a later
        flush sends them again (appends are idempotent by (attempt, seq))."""
        if not self._ordered:
            async with self._flushing:
                return await self._flush()
        async with self._flushing:
            sent = self._send()
        await _settle(sent)
        return self.appended_seq

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The event loop the log lives on (its execution's)."""
        return self._loop

    @property
    def put_off(self) -> bool:
        """Whether a checkpoint put off is not sent or not checked yet."""
        return bool(self._later or self._unchecked)

    @property
    def ordered(self) -> bool:
        """Whether the log appends through the saver's stream (`send_through`)."""
        return self._ordered

    async def checkpoint_later(self, store: Callable[[int], Awaitable[tuple[Any, int]]]) -> None:
        """Like :meth:`checkpoint`, without waiting: ``store(boundary)`` is called
        with the next message sent (the first step's writes, events or checkpoint),
        ahead of it in the same frame, and its answer is checked, its error raised
        first, by the next :meth:`checkpoint`, :meth:`ahead_of` or :meth:`settle`
        (:meth:`close` sends it and waits, raising nothing; decision 530). Only for
        a checkpoint with which the service writes no events of its own (an answer
        past the boundary fails the check): the events sent behind it are numbered
        before its answer."""
        if not self._ordered:
            raise RuntimeError("a checkpoint is put off only on the saver's stream")
        async with self._flushing:
            # Events not sent yet go before it, as before a checkpoint.
            self._send()
            boundary = self._sent_seq

            async def send() -> None:
                _, last_seq = await store(boundary)
                if last_seq != boundary:
                    # What the caller's gate (a turn with no root checkpoint of its
                    # own, so no effect) rules out: events of the service's own
                    # with this checkpoint, at seqs sent behind it.
                    raise RuntimeError(
                        f"turn {self.turn_id}: the service wrote events with a checkpoint "
                        f"put off at seq {boundary} (its last_seq {last_seq}); "
                        "the events sent behind it are not numbered after them"
                    )

            self._later.append((None, send))

    async def write_later(self, write: Callable[[], Awaitable[Any]]) -> bool:
        """Behind a checkpoint put off and not sent yet, with no event waiting to
        go before it: put ``write()`` (a task's writes) off too, to go right behind
        that checkpoint, and return True; its answer is checked as the
        checkpoint's is. Otherwise return False: the caller writes it now."""
        async with self._flushing:
            if not self._later:
                return False
            with self._lock:
                if any(e.seq > self._sent_seq for e in self._pending):
                    return False

            async def send() -> None:
                await write()

            self._later.append((None, send))
            return True

    async def write_with_step(self, write: Callable[[], Awaitable[Any]]) -> bool:
        """On the saver's stream, put ``write()`` (a task's writes) off until the
        next message sent (the step's checkpoint, at the latest a read, an effect or
        the run's end), behind every event emitted so far, and return True without
        waiting: the step then goes in one frame, its events, its writes, its
        `values` and its checkpoint, where the writes went as soon as LangGraph
        saved them and the checkpoint waited behind them (decision 771). The
        answer is checked as a put-off checkpoint's is. False off the stream."""
        if not self._ordered:
            return False
        async with self._flushing:
            bound = self.last_seq

            async def send() -> None:
                await write()

            self._later.append((bound, send))
            if self._held is None:
                self._held = self._loop.call_later(WRITES_HELD_SECONDS, self._held_too_long)
            return True

    def _held_too_long(self) -> None:
        """Writes put off waited WRITES_HELD_SECONDS: the flusher sends them."""
        self._held = None
        self._wake.set()

    def _launch(self) -> None:
        """Send what was put off, ahead of anything sent after this (the flush lock
        held; tasks start in the order they were made): a write behind the events
        up to its seq, each batch of them made before it."""
        if self._held is not None:
            self._held.cancel()
            self._held = None
        later, self._later = self._later, []
        for bound, send in later:
            if bound is not None:
                self._unchecked.extend(self._append_unsent(bound))
            self._unchecked.append(asyncio.ensure_future(send()))

    async def settle(self) -> None:
        """Send a checkpoint put off, if any, and wait for its answer; raise its
        error. Before a read of the turn's state, an effect, or the run's end."""
        if not self.put_off:
            return
        async with self._flushing:
            self._launch()
            unchecked = list(self._unchecked)
        await _settle(unchecked)
        self._checked(unchecked)

    def _checked(self, tasks: Collection[asyncio.Future[Any]]) -> None:
        """These were answered and their answers raised nothing."""
        self._unchecked = [t for t in self._unchecked if t not in tasks]

    async def ahead_of(self, write: Callable[[], Awaitable[T]]) -> T:
        """Append every event emitted so far, then ``write()`` (a task's writes):
        the events are committed before it. Through the saver's stream both go in
        one frame, and the write does not wait for the events' answer."""
        if not self._ordered:
            await self.flush()
            return await write()
        async with self._flushing:
            sent = self._send()
            unchecked = list(self._unchecked)
            # Made after the appends' tasks, so sent after them (tasks start in the
            # order they were made, each up to its message's place on the stream).
            writing = asyncio.ensure_future(write())
        # A checkpoint put off before it: its error first.
        await _settle([*sent, writing], unchecked)
        self._checked(unchecked)
        return writing.result()

    async def checkpoint(self, store: Callable[[int], Awaitable[tuple[T, int]]]) -> T:
        """Flush, then ``store(boundary)`` a checkpoint of the turn, which returns
        what it stored and the turn's last_seq the service answered; returns the
        former. Nothing is appended while the checkpoint is under way, and events
        emitted meanwhile are numbered after that last_seq: seqs the service took
        for its own events with the checkpoint are not written again. Through the
        saver's stream, the events and the checkpoint go in one frame (decision
        420): the checkpoint is sent behind them without waiting for their answer,
        and the stream commits them in that order."""
        async with self._flushing:
            if not self._ordered:
                stored, last_seq = await store(await self._flush())
                boundary = self.appended_seq
            else:
                # Every append sent before this one (the flusher's) is on the
                # stream ahead of it, and answered before the checkpoint is.
                sent = self._send()
                # A checkpoint put off (sent first by `_send`) is answered before
                # this one, and its error raised first.
                earlier = [*self._unchecked, *self._inflight.difference(sent)]
                boundary = self._sent_seq
                storing = asyncio.ensure_future(store(boundary))
                await _settle([*sent, storing], earlier)
                self._checked(earlier)
                stored, last_seq = storing.result()
            with self._lock:
                # Nothing is in flight (the flush lock is held and every append
                # sent was answered), so no buffered event has been sent under its
                # seq yet. A service that writes no events of its own answers no
                # more than the boundary.
                shift = last_seq - boundary
                if shift > 0:
                    for event in self._pending:
                        if event.seq > boundary:
                            event.seq += shift
                    self._next_seq += shift
                self.appended_seq = max(self.appended_seq, last_seq)
                self._sent_seq = max(self._sent_seq, last_seq)
            return stored

    def _send(self) -> list[asyncio.Task[None]]:
        """Start appending every event not sent yet (ordered transport; the flush
        lock held): one task per batch, made in seq order."""
        self._launch()
        return self._append_unsent()

    def _append_unsent(self, upto: int | None = None) -> list[asyncio.Task[None]]:
        """Start appending the events not sent yet (up to seq ``upto``; the flush
        lock held): one task per batch, made in seq order."""
        tasks = []
        with self._lock:
            unsent = [
                e
                for e in self._pending
                if e.seq > self._sent_seq and (upto is None or e.seq <= upto)
            ]
            for start in range(0, len(unsent), MAX_BATCH):
                task = asyncio.ensure_future(self._append_batch(unsent[start : start + MAX_BATCH]))
                self._inflight.add(task)
                task.add_done_callback(self._inflight.discard)
                tasks.append(task)
            if unsent:
                self._sent_seq = unsent[-1].seq
        return tasks

    async def _append_batch(self, batch: list[turns_pb2.EventInput]) -> None:
        try:
            await self._append(
                turns_pb2.AppendEventsRequest(
                    turn_id=self.turn_id, attempt=self.attempt, events=batch
                )
            )
        except BaseException:
            with self._lock:
                # Not appended: the next flush sends them (and what follows) again.
                self._sent_seq = min(self._sent_seq, batch[0].seq - 1)
            raise
        with self._lock:
            done = {id(event) for event in batch}
            self._pending = [e for e in self._pending if id(e) not in done]
            self.appended_seq = max(self.appended_seq, batch[-1].seq)

    async def _flush(self) -> int:
        while True:
            with self._lock:
                batch = self._pending[:MAX_BATCH]
            if not batch:
                return self.appended_seq
            await self._append(
                turns_pb2.AppendEventsRequest(
                    turn_id=self.turn_id, attempt=self.attempt, events=batch
                )
            )
            with self._lock:
                del self._pending[: len(batch)]
                self.appended_seq = batch[-1].seq

    async def close(self, *last: tuple[str, Any]) -> list[turns_pb2.EventInput]:
        """Stop taking events; return those not appended yet followed by ``last``
        (type, data) events, for the ParkTurn or FinishTurn that writes them in the
        same transaction as the state change: a reader that sees the ``interrupt``
        or ``final`` event can count on the turn being PARKED or over."""
        async with self._flushing:
            # A checkpoint put off goes now (its answer is the caller's `settle`'s
            # to check; a run that failed ends FAILED either way).
            self._launch()
            # Appends still under way end first: what they carry is not sent twice.
            await asyncio.gather(*self._inflight, *self._unchecked, return_exceptions=True)
            with self._lock:
                self._closed = True
                pending, self._pending = self._pending, []
                for type_, data in last:
                    pending.append(
                        turns_pb2.EventInput(
                            seq=self._next_seq, type=type_, data_json=_bounded(dumps(data))
                        )
                    )
                    self._next_seq += 1
        return pending

    def discard(self) -> None:
        """Drop what is buffered and take no more (the execution is giving up)."""
        with self._lock:
            self._closed = True
            self._pending = []
        self._later = []
        if self._held is not None:
            self._held.cancel()
            self._held = None

    async def run(self, on_fenced: Callable[[TurnkeeperError], None]) -> None:
        """Flush whenever events arrive, until cancelled. A fenced append means the
        execution lost the turn: ``on_fenced`` is told and the flusher stops."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except FENCED as exc:
                on_fenced(exc)
                return
            except TurnkeeperError as exc:
                # The client already retried UNAVAILABLE; the next flush (at the
                # latest the one before the next checkpoint) sends them again.
                log.warning(
                    "turn_id=%s attempt=%d: appending events failed, will retry: %s",
                    self.turn_id,
                    self.attempt,
                    exc,
                )


async def _settle(
    tasks: Sequence[asyncio.Future[Any]], earlier: Collection[asyncio.Future[Any]] = ()
) -> None:
    """Wait for every task (and the `earlier` ones, another caller's); raise the
    first error, in the order they were sent (an append's before the write behind
    it). Cancelled, the caller stops waiting and the messages go on (each is
    idempotent, as a retried one is)."""
    everything = [*earlier, *tasks]
    for task in everything:
        task.add_done_callback(_retrieved)
    if everything:
        await asyncio.wait(everything)
    for task in everything:
        if task.cancelled():
            if task in tasks:
                raise asyncio.CancelledError
            continue
        if (exc := task.exception()) is not None:
            raise exc


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Mark a task's outcome seen: one nobody waited for is not logged as lost."""
    if not task.cancelled():
        task.exception()


def _bounded(text: str) -> str:
    size = len(text.encode())
    if size <= MAX_EVENT_BYTES:
        return text
    return dumps({"truncated": True, "bytes": size, "head": text[:1024]})
