"""The boundary rule (docs/architecture.md §3), enforced where checkpoints are written.

Every checkpoint a turn writes records the turn's ``last_seq`` at that moment as
its boundary; a re-drive rewinds the event stream to the boundary of the newest
checkpoint and re-runs the step after it. For that to lose nothing and repeat
nothing, every event a step produced must be appended *before* the checkpoint that
ends the step. :class:`BoundarySaver` makes it so: before it stores a checkpoint or
a task's writes for a turn, it flushes that turn's :class:`~turnkeeper.agent.bridge._events.EventLog`.

LangGraph calls ``aput`` from a background task after ``after_tick`` and, with
``durability="sync"``, waits for it before the next step starts; ``aput_writes``
runs as each task of a step finishes. The events are already in the log at that
point (they are captured by callbacks inside the node), so the flush covers them.

Orphaned writes. A task's writes are stored as soon as the task finishes, against
the step's starting checkpoint, and a resumed graph does not run again a task whose
writes it finds. But a re-drive rewinds the events to that checkpoint's boundary,
which drops the finished task's events too (they interleave with those of the tasks
still running, so no boundary could keep them apart). Left alone, the task would
neither run again nor have events: a gap in the stream. So when an execution
starts right at a checkpoint's boundary (nothing retained after it: a rewind just
happened), the saver hands LangGraph that checkpoint without the writes of its
tasks, and the whole step runs again, finished siblings included. Writes that are
not a task's own result (an interrupt, a resume value, an error, the run's input)
are kept. Each checkpoint records, in its metadata under ``turnkeeper``, the turn
and the seq of its boundary, which is how the saver knows; a root checkpoint also
records under ``graph`` the version of the code that wrote it (docs/versions.md).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

from turnkeeper._graph_versions import STAMP_KEY
from turnkeeper.agent.bridge._events import EventLog
from turnkeeper.agent.saver import RemoteSaver
from turnkeeper.agent.saver._identity import turn_identity
from turnkeeper.v1 import turns_pb2

log = logging.getLogger(__name__)

# The checkpoint metadata key of the boundary: {"turn_id": ..., "last_seq": ...}.
METADATA_KEY: Final = "turnkeeper"
# LangGraph's task id for writes that come from the run's input (a Command's resume
# or update), not from a task (langgraph's NULL_TASK_ID).
_NULL_TASK_ID: Final = "00000000-0000-0000-0000-000000000000"


class BoundarySaver(RemoteSaver):
    """A :class:`~turnkeeper.agent.saver.RemoteSaver` that flushes the turn's events
    first. Executions register their log with :meth:`attach`; a checkpoint whose
    config names no attached (turn_id, attempt) is stored as RemoteSaver stores it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._logs: dict[tuple[str, int], EventLog] = {}
        self._logs_lock = threading.Lock()
        # Executions whose claim found their thread without a root checkpoint and
        # that have not read or written one since (attach's thread_empty).
        self._empty: set[tuple[str, int]] = set()
        # Executions of a turn with no root checkpoint of its own, until their first
        # write: their input checkpoint is put off to ride the first step's frame
        # (decision 530).
        self._fresh: set[tuple[str, int]] = set()
        #: Set: each root checkpoint of a turn (but its input's) is preceded by a
        #: ``values`` event of the state it holds (this function's view of its channel values), so it is
        #: retained with the checkpoint and a rewind to it keeps it.
        self.values_of: Callable[[Mapping[str, Any], int], Any] | None = None
        #: Set with ``values_of``: the channels the graph's ``values`` stream shows;
        #: a step that changed none of them is not shown again (as LangGraph's loop
        #: emits ``values`` only for a tick that updated an output channel).
        self.values_channels: frozenset[str] | None = None
        #: Set: each root checkpoint of a turn records, under ``graph`` in its
        #: mark, what this function says about the code that wrote it (its graph
        #: version, next nodes and channels: turnkeeper._graph_versions.Stamp).
        self.stamp_of: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None

    def attach(self, events: EventLog, *, thread_empty: bool = False, fresh: bool = False) -> None:
        """Register an execution's log. ``thread_empty``: its claim found the thread
        without a root checkpoint, so the graph's first read of the thread's latest
        one is answered "none" without a round trip (decision 480). ``fresh`` (or
        ``thread_empty``): the turn has no root checkpoint of its own (it continues
        from its journaled input), so it has begun no effect and its input
        checkpoint may ride the first step's frame (decision 530)."""
        if self.stream:
            # One stream per run carries its events and its checkpoints, in order.
            events.send_through(self.aappend_events)
        key = (events.turn_id, events.attempt)
        with self._logs_lock:
            self._logs[key] = events
            if thread_empty:
                self._empty.add(key)
            else:
                self._empty.discard(key)
            if thread_empty or fresh:
                self._fresh.add(key)
            else:
                self._fresh.discard(key)

    def detach(self, events: EventLog) -> None:
        key = (events.turn_id, events.attempt)
        with self._logs_lock:
            if self._logs.get(key) is events:
                del self._logs[key]
                self._empty.discard(key)
                self._fresh.discard(key)
        self.end_run(events.turn_id, events.attempt)

    def _known_empty(self, config: RunnableConfig, *, read: bool) -> bool:
        """Whether the claim said the thread has no root checkpoint and nothing since
        may have written one: only the execution's first read, of the root namespace's
        latest, before it stored anything. Any other read or any write ends it."""
        identity = turn_identity(config)
        if identity is None:
            return False
        configurable = config.get("configurable") or {}
        with self._logs_lock:
            if identity not in self._empty:
                return False
            self._empty.discard(identity)
        return (
            read and not configurable.get("checkpoint_id") and not configurable.get("checkpoint_ns")
        )

    def _first_write(self, config: RunnableConfig) -> bool:
        """Whether this is the execution's first write and its turn has no root
        checkpoint of its own (attach's ``fresh``); either way, the next write is not."""
        identity = turn_identity(config)
        if identity is None:
            return False
        with self._logs_lock:
            if identity not in self._fresh:
                return False
            self._fresh.discard(identity)
        return True

    async def _settled(self, identity: tuple[str, int] | None) -> None:
        """A checkpoint of this execution put off is sent and answered (before a
        read of the thread or an effect, which must see it)."""
        if identity is None:
            return
        with self._logs_lock:
            events = self._logs.get(identity)
        if events is not None:
            await events.settle()

    def _log_for(self, config: RunnableConfig) -> EventLog | None:
        identity = turn_identity(config)
        if identity is None:
            return None
        with self._logs_lock:
            return self._logs.get(identity)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._known_empty(config, read=False)
        first = self._first_write(config)
        events = self._log_for(config)
        if events is None:
            return await super().aput(config, checkpoint, metadata, new_versions)
        if self.values_of is not None and _shows_values(
            config, metadata, new_versions, self.values_channels
        ):
            # The state made at depth 1, its place in the event: plain JSON.
            state = self.values_of(checkpoint["channel_values"], 1)
            events.emit("values", {"values": state}, plain=True)

        async def store(boundary: int) -> tuple[RunnableConfig, int]:
            mark: dict[str, Any] = {"turn_id": events.turn_id, "last_seq": boundary}
            if self.stamp_of is not None and not config["configurable"].get("checkpoint_ns"):
                mark[STAMP_KEY] = self.stamp_of(checkpoint)
            marked = {**metadata, METADATA_KEY: mark}
            return await self.aput_fenced(config, checkpoint, marked)  # type: ignore[arg-type]

        configurable = config["configurable"]
        if (
            first
            and events.ordered
            and metadata.get("source") == "input"
            and not configurable.get("checkpoint_ns")
        ):
            # The input checkpoint of a turn with no root checkpoint of its own: sent
            # with the first step's frame, not waited for here (decision 530). The
            # service announces no superseded effect with it: its turn has begun
            # none (an effect begins only after a root checkpoint of its turn is
            # answered, this one included).
            await events.checkpoint_later(store)
            return {
                "configurable": {
                    "thread_id": configurable["thread_id"],
                    "checkpoint_ns": "",
                    "checkpoint_id": checkpoint["id"],
                }
            }
        # Through the log: the service may announce superseded effects with the
        # checkpoint, in seqs the log must not number its next events with.
        return await events.checkpoint(store)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if self._known_empty(config, read=True):
            return None  # the claim's answer: a new thread's first run has none
        await self._settled(turn_identity(config))
        found = await super().aget_tuple(config)
        events = self._log_for(config)
        if found is None or events is None or not found.pending_writes:
            return found
        mark = (found.metadata or {}).get(METADATA_KEY)
        if not isinstance(mark, dict) or mark.get("turn_id") != events.turn_id:
            return found  # another turn's checkpoint (or written without the bridge)
        boundary = mark.get("last_seq")
        if not isinstance(boundary, int) or events.start_seq > boundary:
            return found  # events after the checkpoint were kept: its writes stand
        kept = [w for w in found.pending_writes if w[1] in WRITES_IDX_MAP or w[0] == _NULL_TASK_ID]
        if len(kept) < len(found.pending_writes):
            log.info(
                "turn_id=%s attempt=%d: %d task write(s) of checkpoint %s were rewound "
                "away with their events; the step runs again",
                events.turn_id,
                events.attempt,
                len(found.pending_writes) - len(kept),
                found.config["configurable"].get("checkpoint_id"),
            )
        return found._replace(pending_writes=kept)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._known_empty(config, read=False)
        self._first_write(config)
        events = self._log_for(config)
        if events is None:
            await super().aput_writes(config, writes, task_id, task_path)
            return
        # The step's events first: in the same frame when the stream carries both.
        write = super().aput_writes
        if await events.write_later(lambda: write(config, writes, task_id, task_path)):
            return  # behind the input checkpoint put off, in its frame (decision 530)
        if await events.write_with_step(lambda: write(config, writes, task_id, task_path)):
            return  # in the frame of the step's checkpoint (decision 771)
        await events.ahead_of(lambda: write(config, writes, task_id, task_path))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        if config is not None:
            await self._settled(turn_identity(config))
        async for found in super().alist(config, filter=filter, before=before, limit=limit):
            yield found

    async def abegin_effect(
        self, request: turns_pb2.BeginEffectRequest
    ) -> turns_pb2.BeginEffectResponse:
        # An effect names its step's checkpoint: that is stored first.
        await self._settled((request.call.turn_id, request.call.attempt))
        return await super().abegin_effect(request)

    def begin_effect(self, request: turns_pb2.BeginEffectRequest) -> turns_pb2.BeginEffectResponse:
        key = (request.call.turn_id, request.call.attempt)
        with self._logs_lock:
            events = self._logs.get(key)
        if events is not None and events.put_off and not _on_loop(events.loop):
            # A sync node's thread: the log lives on the bridge's event loop.
            asyncio.run_coroutine_threadsafe(events.settle(), events.loop).result()
        return super().begin_effect(request)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._refuse_sync(config)
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._refuse_sync(config)
        super().put_writes(config, writes, task_id, task_path)

    def _refuse_sync(self, config: RunnableConfig) -> None:
        # The event log lives on the bridge's event loop; a blocking put could not
        # flush it first, and storing without flushing would break the boundary.
        if self._log_for(config) is not None:
            raise RuntimeError(
                "a turn run by the bridge checkpoints through the async API only "
                "(the graph is driven with astream)"
            )


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether this thread runs `loop` (which it then cannot block on)."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _shows_values(
    config: RunnableConfig,
    metadata: CheckpointMetadata,
    new_versions: ChannelVersions,
    channels: frozenset[str] | None,
) -> bool:
    """A checkpoint whose state the run's ``values`` stream shows, as LangGraph's
    does: the root graph's (a subgraph's state is its own, in its namespace), once
    its input is applied (an ``input`` checkpoint holds the input not yet read), and
    after a step only if the step changed what the stream shows (`channels`; a
    node that wrote nothing, or an input of ``{}``, shows nothing new)."""
    if config["configurable"].get("checkpoint_ns") or metadata.get("source") == "input":
        return False
    if metadata.get("source") == "loop" and channels is not None:
        return not channels.isdisjoint(new_versions)
    return True
