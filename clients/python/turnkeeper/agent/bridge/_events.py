"""A turn's event stream on the executor side: the graph's callbacks become events
with contiguous ``seq``, buffered and appended to the service.

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

Event types and their ``data``:

- ``token`` ``{node, text}``: a chunk of a chat model's streamed reply; on a bridge
  serving the LangGraph API also ``id`` (its message's id), ``chunk`` (the whole
  ``AIMessageChunk`` as LangGraph's server sends it: ``tool_call_chunks``,
  ``usage_metadata``, ``response_metadata``, ...) for every chunk, those without
  text (tool-call chunks, the closing one) included, and on a model call's first
  chunk ``metadata`` (the call's LangGraph metadata: ``langgraph_step``,
  ``langgraph_node``, ``langgraph_path``, ``checkpoint_ns``, ``ls_*``, ...);
- ``tool_call_start`` ``{node, name, tool_call_id, input}`` and
  ``tool_call_end`` ``{node, name, tool_call_id, output | error}``;
- ``step`` ``{node, step, update}``: a node of the graph finished (``step`` is
  LangGraph's superstep, ``update`` what the node returned; on a bridge serving
  the LangGraph API, messages in it whole and the node's ``metadata``);
- ``interrupt`` ``{id, value}``: the graph called ``interrupt(value)``; the turn parks;
- ``values`` ``{values}``: the graph's state, before each checkpoint (on a bridge
  serving the LangGraph API, ``BridgeConfig.langgraph_api``);
- ``custom`` ``{data}``: what the graph wrote with ``get_stream_writer()`` (on a
  bridge serving the LangGraph API; read from the stream, so a crash right after
  its step's checkpoint can lose it);
- ``stream`` ``{ns, mode, data}``: a part of the graph's own stream that a LangGraph
  API run asked for beyond these (:class:`StreamCapture`: the ``checkpoints``,
  ``tasks`` and ``debug`` modes, and its subgraphs' parts);
- ``final`` ``{output}``: the graph's output; the service then appends ``turn.done``;
- ``error`` ``{type, message}``: the graph raised; the service then appends
  ``turn.failed``.

Event data holds no run ids or timestamps, so an execution that re-runs a step
produces the same events as the one that was lost.

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
import importlib.metadata
import logging
import threading
from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any, Final, TypeVar, cast
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tracers.event_stream import _AstreamEventsCallbackHandler
from langgraph._internal._constants import CONFIG_KEY_STREAM
from langgraph.errors import GraphBubbleUp
from langgraph.pregel.protocol import StreamProtocol
from langgraph.types import StreamMode

from turnkeeper.agent.bridge._convert import dumps, to_jsonable
from turnkeeper.agent.saver._identity import ATTEMPT_KEY, TURN_ID_KEY
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import StaleAttempt, TurnkeeperError, TurnNotFound, WrongState
from turnkeeper.v1 import turns_pb2

log = logging.getLogger(__name__)

# The service refuses an event over 256 KiB and a batch over 1000 events; stay under.
MAX_EVENT_BYTES: Final = 192 * 1024
MAX_BATCH: Final = 500

Append = Callable[[turns_pb2.AppendEventsRequest], Awaitable[turns_pb2.AppendEventsResponse]]
T = TypeVar("T")

# LangGraph's server names its langgraph in every message part's metadata.
_LANGGRAPH_VERSION: Final = importlib.metadata.version("langgraph")

# Metadata keys that say which execution ran, not what it did.
_PRIVATE_METADATA: Final = frozenset({TURN_ID_KEY, ATTEMPT_KEY})

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


def _name_messages(output: Any) -> None:
    """Give each message a node returned without an id one (LangGraph's
    StreamMessagesHandler does the same, on the same objects)."""
    values = list(output.values()) if isinstance(output, dict) else [output]
    for value in values:
        for message in value if isinstance(value, list | tuple) else [value]:
            if isinstance(message, BaseMessage) and message.id is None:
                message.id = str(uuid4())


def _bounded(text: str) -> str:
    size = len(text.encode())
    if size <= MAX_EVENT_BYTES:
        return text
    return dumps({"truncated": True, "bytes": size, "head": text[:1024]})


class EventCapture(BaseCallbackHandler):
    """LangChain callbacks of one graph run, as events in an :class:`EventLog`.

    ``run_inline``: called in the node's own thread or task, in order, before the
    node goes on, so an event is in the log before the node's writes are saved."""

    run_inline = True
    raise_error = False

    def __init__(
        self,
        events: EventLog,
        *,
        message_ids: bool = False,
        channels: Collection[str] | None = None,
        tokens: bool = True,
    ) -> None:
        self.events = events
        # False: no `token` event, though a model streams (one made to, or the
        # `events` mode's handler making it): the run asked for none (decision 770).
        self.tokens = tokens
        # Tokens carry their message's id (the LangGraph API's message chunks do;
        # off elsewhere: a re-run's model makes up new ids, and transcripts compare).
        self.message_ids = message_ids
        # A step's update holds these of the node's output only, as LangGraph's
        # `updates` do (a subgraph's node returns the subgraph's whole state).
        self.channels = None if channels is None else frozenset(channels)
        self._lock = threading.Lock()
        self._root: UUID | None = None
        self._nodes: dict[UUID, tuple[str, int, dict[str, Any]]] = {}
        self._models: dict[UUID, tuple[str, dict[str, Any]]] = {}
        self._described: set[UUID] = set()
        self._tools: dict[UUID, dict[str, Any]] = {}

    # The graph and its nodes.

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            if parent_run_id is None:
                self._root = run_id
                return
            node = (metadata or {}).get("langgraph_node")
            # Only the graph's own nodes are steps; chains inside a node (and the
            # nodes of a subgraph) are part of that node's step.
            if parent_run_id == self._root and node and kwargs.get("name") == node:
                step = int((metadata or {}).get("langgraph_step", 0))
                self._nodes[run_id] = (str(node), step, self._metadata(metadata))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            node = self._nodes.pop(run_id, None)
        if node is None:
            return
        if self.channels is not None and isinstance(outputs, dict):
            outputs = {k: v for k, v in outputs.items() if k in self.channels}
            # A node that wrote none of them: LangGraph's `updates` says null.
            outputs = outputs or None
        data: dict[str, Any] = {"node": node[0], "step": node[1], "update": outputs}
        if self.message_ids:
            # The LangGraph API's `updates` carry messages whole, and a message the
            # node returned is streamed whole with the node's metadata: one without
            # an id gets one here, as LangGraph's server's stream handler gives it
            # (the state's reducer keeps it).
            _name_messages(outputs)
            # At depth 1, its place in `data`: the event's JSON as it is (plain).
            data["update"] = to_jsonable(outputs, 1, whole=True)
            data["metadata"] = node[2]
            self.events.emit("step", data, plain=True)
            return
        self.events.emit("step", data)

    def _metadata(self, metadata: dict[str, Any] | None) -> dict[str, Any]:
        """A callback's metadata as the LangGraph API's message parts carry it: plain
        JSON values, without the run's fencing keys (an execution's attempt must not
        make a re-run's events differ)."""
        if not self.message_ids or not metadata:
            return {}
        # Depth 2: the place of its values in an event's data (`metadata`'s).
        return {
            "langgraph_version": _LANGGRAPH_VERSION,
            **{
                str(k): to_jsonable(v, 2)
                for k, v in metadata.items()
                if k not in _PRIVATE_METADATA and not str(k).startswith("__")
            },
        }

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        # An interrupted or failed node is not a finished step: the interrupt or the
        # error is reported once, for the whole run, by the runtime.
        with self._lock:
            self._nodes.pop(run_id, None)
        if not isinstance(error, GraphBubbleUp):
            log.debug("turn_id=%s: node run %s failed: %r", self.events.turn_id, run_id, error)

    # Chat models and LLMs.

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self._models[run_id] = (
                str((metadata or {}).get("langgraph_node", "")),
                self._metadata(metadata),
            )

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self._models[run_id] = (str((metadata or {}).get("langgraph_node", "")), {})

    def on_llm_new_token(
        self, token: str | list[str | dict[str, Any]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        if not self.tokens:
            return
        if not isinstance(token, str):
            # Content blocks: the text ones are what a reader sees.
            token = "".join(
                b if isinstance(b, str) else str(b.get("text", ""))
                for b in token
                if isinstance(b, str) or b.get("type") == "text"
            )
        message = getattr(kwargs.get("chunk"), "message", None)
        whole = self.message_ids and isinstance(message, BaseMessage)
        if not token and not whole:
            return  # tool-call chunks and empty keep-alives carry no text
        with self._lock:
            node, metadata = self._models.get(run_id, ("", {}))
            # The call's metadata rides on its first chunk only: the same for all.
            first = run_id not in self._described
            self._described.add(run_id)
        data: dict[str, Any] = {"node": node, "text": token}
        message_id = getattr(message, "id", None)
        if self.message_ids and isinstance(message_id, str):
            data["id"] = message_id
        if whole:
            # The chunk as LangGraph's server streams it, every field of it (at
            # depth 1, its place in `data`).
            data["chunk"] = to_jsonable(message, 1, whole=True)
            if first:
                data["metadata"] = metadata
        # Plain: the node and the text are strings, the id a string, the rest made
        # at its depth (the metadata by `_metadata`).
        self.events.emit("token", data, plain=True)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._models.pop(run_id, None)
            self._described.discard(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._models.pop(run_id, None)
            self._described.discard(run_id)

    # Tools.

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        call = {
            "node": str((metadata or {}).get("langgraph_node", "")),
            "name": (serialized or {}).get("name") or kwargs.get("name") or "",
            "tool_call_id": kwargs.get("tool_call_id"),
        }
        with self._lock:
            self._tools[run_id] = call
        self.events.emit("tool_call_start", call | {"input": inputs if inputs else input_str})

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._tools.pop(run_id, None)
        if call is not None:
            content = getattr(output, "content", output)
            self.events.emit("tool_call_end", call | {"output": to_jsonable(content)})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._tools.pop(run_id, None)
        if call is not None and not isinstance(error, GraphBubbleUp):
            self.events.emit("tool_call_end", call | {"error": f"{type(error).__name__}: {error}"})


class StreamCapture:
    """What a LangGraph API run asks of the graph's own stream beyond every run's
    events (its ``stream`` option, turnkeeper._run_request): the ``checkpoints``,
    ``tasks`` and ``debug`` modes, with ``subgraphs`` the ``values``, ``updates``
    and ``custom`` parts of the graph's subgraphs, and the ``events`` mode
    (:class:`_RunEvents`), as ``stream`` events ``{ns, mode, data}`` (``ns``: the
    namespace, ``[]`` for the root graph).

    Handed to LangGraph as the run's stream (:meth:`configurable`), which every
    Pregel loop of the run, a subgraph's too, writes its parts to as it produces
    them, in the loop's own thread: so a step's parts are in the :class:`EventLog`
    before the step's checkpoint is stored, and retained with it (the boundary rule).
    The root graph's ``values`` and ``updates`` are journaled as every run's are
    (``values``, ``step``); they are not repeated here."""

    ROOT_MODES: Final[tuple[StreamMode, ...]] = ("checkpoints", "tasks", "debug")
    SUBGRAPH_MODES: Final[tuple[StreamMode, ...]] = ("values", "updates", "custom")

    def __init__(self, events: EventLog, captures: list[str], graph_name: str) -> None:
        self.events = events
        self.graph_name = graph_name
        self.subgraphs = "subgraphs" in captures
        modes: set[StreamMode] = {m for m in self.ROOT_MODES if m in captures}
        if self.subgraphs:
            modes.update(self.SUBGRAPH_MODES)
        self.modes = modes
        self.events_mode = "events" in captures

    def applied(self, config: RunnableConfig) -> RunnableConfig:
        """``config`` with what makes LangGraph write to this capture: the run's
        stream in its configurable keys, the ``events`` handler in its callbacks."""
        configured: Any = dict(config)
        if self.modes:
            stream = StreamProtocol(self, self.modes)
            configured["configurable"] = {**config["configurable"], CONFIG_KEY_STREAM: stream}
        if self.events_mode:
            handler = _RunEvents(self.events, self.graph_name)
            callbacks = config.get("callbacks")
            if isinstance(callbacks, BaseCallbackManager):
                callbacks = callbacks.copy()
                callbacks.add_handler(handler, inherit=True)
                configured["callbacks"] = callbacks
            else:
                configured["callbacks"] = [*(callbacks or []), handler]
        return cast(RunnableConfig, configured)

    def __call__(self, chunk: tuple[tuple[str, ...], str, Any]) -> None:
        ns, mode, data = chunk
        if not ns and mode in self.SUBGRAPH_MODES:
            return  # the root's: journaled as every run's are
        if ns and not self.subgraphs:
            return
        data = _without_internals(to_jsonable(data, whole=True))
        self.events.emit("stream", {"ns": list(ns), "mode": mode, "data": data})


def _without_internals(value: Any) -> Any:
    """A part without the run's private configurable keys (``__``-prefixed: the
    effect ledger's snapshot, LangGraph's own), which a checkpoint's config holds."""
    if isinstance(value, dict):
        return {
            k: (
                {n: v for n, v in c.items() if not str(n).startswith("__")}
                if k == "configurable" and isinstance(c := value[k], dict)
                else _without_internals(value[k])
            )
            for k in value
        }
    if isinstance(value, list):
        return [_without_internals(v) for v in value]
    return value


class _RunEvents(_AstreamEventsCallbackHandler):
    """The ``events`` stream mode: the run's callbacks as LangChain's
    ``astream_events`` (v2) makes them, journaled instead of queued. As LangGraph's
    server sends them: without the hidden ones (``langsmith:hidden``). Its async
    callbacks run as the graph's do; an event that lands after its step's
    checkpoint is lost with a crash right then, never sent twice (like ``custom``)."""

    def __init__(self, events: EventLog, graph_name: str) -> None:
        super().__init__()
        self._log = events
        self._graph_name = graph_name
        self._root: str | None = None

    def _send(self, event: Any, event_type: str) -> None:
        if not self.root_event_filter.include_event(event, event_type):
            return
        if "langsmith:hidden" in (event.get("tags") or ()):
            return
        event = dict(event)
        if not event.get("parent_ids"):
            # The graph's own run, as LangGraph's server runs it: named after the
            # graph, its id the run's, its end with the output only.
            self._root = self._root or str(event.get("run_id"))
            event["name"] = self._graph_name
            if event.get("event") == "on_chain_end" and isinstance(event.get("data"), dict):
                event["data"] = {k: v for k, v in event["data"].items() if k != "input"}
        if self._root is not None:
            turn = self._log.turn_id
            event["run_id"] = turn if event.get("run_id") == self._root else event.get("run_id")
            event["parent_ids"] = [
                turn if p == self._root else p for p in event.get("parent_ids") or []
            ]
        data = to_jsonable(event, whole=True)
        self._log.emit("stream", {"ns": [], "mode": "events", "data": data})
