"""``RemoteSaver``: a LangGraph checkpointer that stores in the turnkeeper service.

The service keeps checkpoints in sessions.db in langgraph-checkpoint-sqlite's schema,
and this saver does on the client everything ``SqliteSaver`` does before it writes a
row, so that stock ``SqliteSaver`` reads what the service stored (and the other way
round):

- checkpoint and write values are serialized here with ``self.serde.dumps_typed`` and
  sent as opaque ``(type, bytes)``; the service never deserializes them;
- metadata is merged here with ``get_checkpoint_metadata(config, metadata)`` and sent
  as the JSON text SqliteSaver stores (``json.dumps(..., ensure_ascii=False)``);
- channel versions use SqliteSaver's format (:meth:`RemoteSaver.get_next_version`);
- writes use SqliteSaver's ``idx`` (``WRITES_IDX_MAP`` for special channels, else the
  position) and replace existing rows only when every channel is a special one.

Fencing. A checkpoint or a write made while a turn runs carries the turn: when
``config["configurable"]`` has ``turn_id`` and ``attempt`` (:func:`durable_config`
puts them there), the request carries a ``TurnFence`` and the service refuses it
with ABORTED (:class:`~turnkeeper.errors.StaleAttempt`) if that attempt was re-driven
away, so a zombie executor cannot write over the thread of the attempt that replaced
it. The service also records the turn's ``last_seq`` as the checkpoint's boundary.

Durability. Turns must run with ``durability="sync"`` (:data:`DURABILITY`,
:func:`durable_run_kwargs`). With LangGraph's default, ``"async"``, the checkpoint of
a finished step is written in the background while the next step already runs: a
SIGKILL in that window loses a checkpoint whose step had completed, so the re-drive
starts from the one before and re-runs a node that had already finished, and its
side effects (a tool call, a reply already streamed) happen twice. With ``"sync"``
each step's checkpoint is committed before the next step starts, so only the node
that was running at the crash re-runs (at-least-once; tools get an idempotency key),
and the event boundary recorded with each checkpoint is exact.

Sync methods use a blocking gRPC channel; async ones a grpc.aio channel per event
loop, opened on first use in that loop, since a graph may be driven from several.

Transport. With the async API (how the bridge runs turns) a run's operations go
by default as messages on one open checkpoint stream per run
(:mod:`turnkeeper.agent.saver._stream`), with the same guarantees as the unary calls;
the blocking API makes one unary call per operation by default, which costs its
graph process less. ``stream=True``/``False`` (or ``TURNKEEPER_SAVER_STREAM=1``/``0``)
sets both. ``share_stream=True`` (or ``TURNKEEPER_SAVER_SHARE_STREAM=1``) puts every
run of an event loop on one stream. Listing and deleting are always unary calls.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final, Self, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.types import Durability

from turnkeeper.agent.saver import _wire as wire
from turnkeeper.agent.saver._channels import Channels
from turnkeeper.agent.saver._extended import ExtendedSaverMethods
from turnkeeper.agent.saver._identity import ATTEMPT_KEY, TURN_ID_KEY
from turnkeeper.agent.saver._stream import (
    run_key,
    turn_key,
)
from turnkeeper.client import ConnectionOptions
from turnkeeper.v1 import checkpoints_pb2, turns_pb2

__all__ = [
    "ATTEMPT_KEY",
    "DURABILITY",
    "STREAM_ENV",
    "TURN_ID_KEY",
    "DurableRunKwargs",
    "RemoteSaver",
    "durable_config",
    "durable_run_kwargs",
]

# The durability every turn runs with; see the module docstring for why.
DURABILITY: Final[Durability] = "sync"

# RemoteSaver()'s transport: unset, the async API streams and the blocking API makes
# unary calls; "1" (or "true", "yes", "on") streams both; "0" (or "false", "no",
# "off") makes unary calls on both.
STREAM_ENV: Final = "TURNKEEPER_SAVER_STREAM"
SHARE_ENV: Final = "TURNKEEPER_SAVER_SHARE_STREAM"


def _stream_defaults() -> tuple[bool, bool]:
    """(async API streams, blocking API streams) when the constructor does not say."""
    value = os.environ.get(STREAM_ENV, "").strip().lower()
    if value in ("0", "false", "no", "off"):
        return False, False
    if value in ("1", "true", "yes", "on"):
        return True, True
    # The blocking API hands each stream message to the saver's own event-loop
    # thread and back, which costs the graph process more than a unary call saves
    # the service (decision 143): it makes unary calls unless asked to stream.
    return True, False


def _share_default() -> bool:
    """Whether runs share one stream per event loop when the constructor does not say."""
    return os.environ.get(SHARE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


class DurableRunKwargs(TypedDict):
    durability: Durability


def durable_run_kwargs() -> DurableRunKwargs:
    """Keyword arguments for ``invoke``/``ainvoke``/``stream``/``astream`` that run
    a graph with ``durability="sync"``::

        await graph.ainvoke(None, durable_config(thread_id, turn_id, attempt),
                            **durable_run_kwargs())
    """
    return {"durability": DURABILITY}


def durable_config(
    thread_id: str, turn_id: str | None = None, attempt: int | None = None
) -> RunnableConfig:
    """The config to run a thread with: with ``turn_id`` and ``attempt`` (both or
    neither), every checkpoint and write the run stores is fenced by that attempt.

    ``turn_id`` and ``attempt`` also end up in each checkpoint's metadata, as any
    plain configurable value does with every LangGraph saver.
    """
    if (turn_id is None) != (attempt is None):
        raise ValueError("turn_id and attempt go together")
    configurable: dict[str, Any] = {"thread_id": thread_id}
    if turn_id is not None:
        if not turn_id:
            raise ValueError("turn_id must not be empty")
        configurable[TURN_ID_KEY] = turn_id
        configurable[ATTEMPT_KEY] = attempt
    return {"configurable": configurable}


class RemoteSaver(ExtendedSaverMethods, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer storing in the turnkeeper service's CheckpointService.

    ``RemoteSaver()`` connects to ``$TURNKEEPER_ADDRESS`` (default
    ``127.0.0.1:50051``); ``address`` overrides ``options.target``. Errors are
    :mod:`turnkeeper.errors` exceptions; a fenced write raises ``StaleAttempt``.
    ``stream``: one checkpoint stream per run (True) or one unary call per
    operation (False), for both APIs. Unset, ``$TURNKEEPER_SAVER_STREAM`` decides,
    and without it the async API (how the bridge runs turns) streams while the
    blocking API makes unary calls. ``share_stream``: every run on an event loop
    shares one stream instead (``$TURNKEEPER_SAVER_SHARE_STREAM=1``), so a frame
    carries a step of several concurrent runs: fewer frames, less CPU on both sides
    when many turns run at once (decision 155).
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        options: ConnectionOptions | None = None,
        serde: SerializerProtocol | None = None,
        stream: bool | None = None,
        share_stream: bool | None = None,
    ) -> None:
        super().__init__(serde=serde)
        options = options if options is not None else ConnectionOptions()
        if address is not None:
            options = dataclasses.replace(options, target=address)
        self.options = options
        # The async API's transport, and the blocking API's.
        self.stream, self.sync_stream = _stream_defaults() if stream is None else (stream, stream)
        self._channels = Channels(
            options, _share_default() if share_stream is None else share_stream
        )

    @classmethod
    @contextmanager
    def from_address(
        cls,
        address: str | None = None,
        *,
        options: ConnectionOptions | None = None,
        serde: SerializerProtocol | None = None,
        stream: bool | None = None,
        share_stream: bool | None = None,
    ) -> Iterator[Self]:
        """A saver closed on exit, like ``SqliteSaver.from_conn_string``::

        with RemoteSaver.from_address("127.0.0.1:50051") as saver:
            graph = builder.compile(checkpointer=saver)
        """
        saver = cls(address, options=options, serde=serde, stream=stream, share_stream=share_stream)
        try:
            yield saver
        finally:
            saver.close()

    def close(self) -> None:
        """Close the saver's channels. Safe to call twice. Inside a coroutine prefer
        ``await saver.aclose()``, which also waits for this loop's channel."""
        for client in self._channels.close():
            # Called from a coroutine of this loop: we cannot await here.
            task = asyncio.get_running_loop().create_task(client.close())
            _background.add(task)
            task.add_done_callback(_background.discard)

    async def aclose(self) -> None:
        """Close the saver's channels, waiting for this event loop's one."""
        await self._channels.aclose_streams()
        for client in self._channels.close():
            await client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # Sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace."""
        request = wire.get_request(config)
        if self.sync_stream:
            response = self._channels.sync_streams().request(run_key(config), get=request).get
        else:
            response = self._channels.sync().get_checkpoint(request)
        return wire.found(self.serde, config, response)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints, newest first (descending checkpoint_id), with their writes."""
        request = wire.list_request(config, filter, before, limit)
        if request is None:
            return
        for response in self._channels.sync().list_checkpoints(request):
            yield wire.to_tuple(self.serde, response.checkpoint, None)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; its parent is the checkpoint ``config`` names."""
        request, stored = wire.put_request(self.serde, config, checkpoint, metadata)
        if self.sync_stream:
            self._channels.sync_streams().request(run_key(config), put=request)
        else:
            self._channels.sync().put_checkpoint(request)
        return stored

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's intermediate writes against the checkpoint ``config`` names."""
        if not writes:
            return
        request = wire.writes_request(self.serde, config, writes, task_id, task_path)
        if self.sync_stream:
            self._channels.sync_streams().request(run_key(config), writes=request)
        else:
            self._channels.sync().put_writes(request)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread."""
        self._channels.sync().delete_thread(
            checkpoints_pb2.DeleteThreadRequest(thread_id=str(thread_id))
        )

    # Async API

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        request = wire.get_request(config)
        if self.stream:
            answer = await self._channels.aio_stream(run_key(config)).request(get=request)
            response = answer.get
        else:
            response = await self._channels.aio().get_checkpoint(request)
        return wire.found(self.serde, config, response)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        request = wire.list_request(config, filter, before, limit)
        if request is None:
            return
        async for response in self._channels.aio().list_checkpoints(request):
            yield wire.to_tuple(self.serde, response.checkpoint, None)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`."""
        stored, _ = await self.aput_fenced(config, checkpoint, metadata)
        return stored

    async def aput_fenced(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> tuple[RunnableConfig, int]:
        """:meth:`aput`, also returning the turn's ``last_seq`` the service recorded as
        the checkpoint's boundary (0 for a checkpoint of no turn). It may be past the
        last event the caller appended: the service writes events of its own with a
        turn's checkpoint (an effect superseded), and the caller's next event comes
        after them."""
        request, stored = wire.put_request(self.serde, config, checkpoint, metadata)
        if self.stream:
            answer = await self._channels.aio_stream(run_key(config)).request(put=request)
            response = answer.put
        else:
            response = await self._channels.aio().put_checkpoint(request)
        return stored, response.last_seq

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async :meth:`put_writes`."""
        if not writes:
            return
        request = wire.writes_request(self.serde, config, writes, task_id, task_path)
        if self.stream:
            await self._channels.aio_stream(run_key(config)).request(writes=request)
        else:
            await self._channels.aio().put_writes(request)

    # The effect ledger (turnkeeper.agent.effect): unary calls beside the run's
    # checkpoint stream. An effect's call must be ordered after nothing but its own
    # begin, and its outcome must be durable before the function's caller goes on.

    def begin_effect(self, request: turns_pb2.BeginEffectRequest) -> turns_pb2.BeginEffectResponse:
        """BeginEffect, blocking."""
        return self._channels.sync().begin_effect(request)

    def record_effect(
        self, request: turns_pb2.RecordEffectRequest
    ) -> turns_pb2.RecordEffectResponse:
        """RecordEffect, blocking."""
        return self._channels.sync().record_effect(request)

    async def abegin_effect(
        self, request: turns_pb2.BeginEffectRequest
    ) -> turns_pb2.BeginEffectResponse:
        """BeginEffect on this event loop's channel."""
        return await self._channels.aio().begin_effect(request)

    async def arecord_effect(
        self, request: turns_pb2.RecordEffectRequest
    ) -> turns_pb2.RecordEffectResponse:
        """RecordEffect on this event loop's channel."""
        return await self._channels.aio().record_effect(request)

    def list_effects(self, turn_id: str) -> Sequence[turns_pb2.Effect]:
        """The turn's whole effect ledger (every page), blocking."""
        request = turns_pb2.ListEffectsRequest(turn_id=turn_id)
        effects: list[turns_pb2.Effect] = []
        while True:
            page = self._channels.sync().list_effects(request)
            effects += page.effects
            if not page.next_page_token:
                return effects
            request.page_token = page.next_page_token

    async def alist_effects(self, turn_id: str) -> Sequence[turns_pb2.Effect]:
        """The turn's whole effect ledger (every page) on this event loop's channel."""
        request = turns_pb2.ListEffectsRequest(turn_id=turn_id)
        effects: list[turns_pb2.Effect] = []
        while True:
            page = await self._channels.aio().list_effects(request)
            effects += page.effects
            if not page.next_page_token:
                return effects
            request.page_token = page.next_page_token

    def end_run(self, turn_id: str, attempt: int) -> None:
        """The run of (turn_id, attempt) is over: close its stream on this loop now
        rather than when it has been idle long enough."""
        self._channels.drop_aio_stream(turn_key(turn_id, attempt))

    async def aappend_events(
        self, request: turns_pb2.AppendEventsRequest
    ) -> turns_pb2.AppendEventsResponse:
        """AppendEvents for a turn run through this saver: on the stream of the run
        (turn_id, attempt) when streaming, so that events and the checkpoints after
        them go in one ordered stream; else the unary call."""
        if self.stream:
            key = turn_key(request.turn_id, request.attempt)
            answer = await self._channels.aio_stream(key).request(append=request)
            return answer.append
        return await self._channels.aio().append_events(request)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async :meth:`delete_thread`."""
        await self._channels.aio().delete_thread(
            checkpoints_pb2.DeleteThreadRequest(thread_id=str(thread_id))
        )

    def get_next_version(self, current: str | None, channel: None) -> str:
        """SqliteSaver's version format: a zero-padded counter, a dot and a random
        fraction, so that versions written here and by SqliteSaver compare alike."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(current.split(".")[0])
        next_v = current_v + 1
        next_h = random.random()
        return f"{next_v:032}.{next_h:016}"


# Tasks of close() called from a coroutine: kept referenced until they finish.
_background: set[asyncio.Task[None]] = set()
