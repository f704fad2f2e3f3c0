"""The boundary rule (DESIGN.md §3), enforced where checkpoints are written.

Every checkpoint a turn writes records the turn's ``last_seq`` at that moment as
its boundary; a re-drive rewinds the event stream to the boundary of the newest
checkpoint and re-runs the step after it. For that to lose nothing and repeat
nothing, every event a step produced must be appended *before* the checkpoint that
ends the step. :class:`BoundarySaver` makes it so: before it stores a checkpoint or
a task's writes for a turn, it flushes that turn's :class:`~turnkeeper.bridge.events.EventLog`.

LangGraph calls ``aput`` from a background task after ``after_tick`` and, with
``durability="sync"``, waits for it before the next step starts; ``aput_writes``
runs as each task of a step finishes. The events are already in the log at that
point (they are captured by callbacks inside the node), so the flush covers them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata

from turnkeeper.bridge.events import EventLog
from turnkeeper.saver import ATTEMPT_KEY, TURN_ID_KEY, RemoteSaver


class BoundarySaver(RemoteSaver):
    """A :class:`~turnkeeper.saver.RemoteSaver` that flushes the turn's events
    first. Executions register their log with :meth:`attach`; a checkpoint whose
    config names no attached (turn_id, attempt) is stored as RemoteSaver stores it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._logs: dict[tuple[str, int], EventLog] = {}
        self._logs_lock = threading.Lock()

    def attach(self, events: EventLog) -> None:
        with self._logs_lock:
            self._logs[(events.turn_id, events.attempt)] = events

    def detach(self, events: EventLog) -> None:
        with self._logs_lock:
            if self._logs.get((events.turn_id, events.attempt)) is events:
                del self._logs[(events.turn_id, events.attempt)]

    def _log_for(self, config: RunnableConfig) -> EventLog | None:
        configurable = config.get("configurable") or {}
        turn_id, attempt = configurable.get(TURN_ID_KEY), configurable.get(ATTEMPT_KEY)
        if turn_id is None or attempt is None:
            return None
        with self._logs_lock:
            return self._logs.get((str(turn_id), int(attempt)))

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if (events := self._log_for(config)) is not None:
            await events.flush()
        return await super().aput(config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if (events := self._log_for(config)) is not None:
            await events.flush()
        await super().aput_writes(config, writes, task_id, task_path)

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
