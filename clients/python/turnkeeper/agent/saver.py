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
"""

from __future__ import annotations

import asyncio
import builtins
import dataclasses
import json
import random
import threading
import weakref
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Final, Self, TypedDict, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
    writes_sort_key,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.types import Durability

from turnkeeper.agent.saver_extended import ExtendedSaverMethods
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions, TurnkeeperClient
from turnkeeper.v1 import checkpoints_pb2

__all__ = [
    "ATTEMPT_KEY",
    "DURABILITY",
    "TURN_ID_KEY",
    "DurableRunKwargs",
    "RemoteSaver",
    "durable_config",
    "durable_run_kwargs",
]

# The configurable keys that tie a checkpoint to a turn (and fence it).
TURN_ID_KEY: Final = "turn_id"
ATTEMPT_KEY: Final = "attempt"

# The durability every turn runs with; see the module docstring for why.
DURABILITY: Final[Durability] = "sync"


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


def _fence(config: RunnableConfig) -> checkpoints_pb2.TurnFence | None:
    configurable = config.get("configurable") or {}
    turn_id = configurable.get(TURN_ID_KEY)
    attempt = configurable.get(ATTEMPT_KEY)
    if not turn_id or attempt is None:
        return None
    return checkpoints_pb2.TurnFence(turn_id=str(turn_id), attempt=int(attempt))


class _Channels:
    """The connections of one saver (shared by its ``with_allowlist`` clones): one
    blocking client, and one aio client per event loop."""

    def __init__(self, options: ConnectionOptions) -> None:
        self.options = options
        self._lock = threading.Lock()
        self._sync: TurnkeeperClient | None = None
        # Weak keys: a loop that is garbage-collected takes its client with it, and
        # grpc closes the core channel of a collected aio channel.
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncTurnkeeperClient]
        self._async = weakref.WeakKeyDictionary()
        self._closed = False

    def sync(self) -> TurnkeeperClient:
        with self._lock:
            if self._closed:
                raise RuntimeError("RemoteSaver is closed")
            if self._sync is None:
                self._sync = TurnkeeperClient(self.options)
            return self._sync

    def aio(self) -> AsyncTurnkeeperClient:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._closed:
                raise RuntimeError("RemoteSaver is closed")
            client = self._async.get(loop)
            if client is None:
                client = self._async[loop] = AsyncTurnkeeperClient(self.options)
            return client

    def close(self) -> list[AsyncTurnkeeperClient]:
        """Close the blocking client and every aio client that can be closed from
        here; return the current loop's aio client for the caller to await."""
        with self._lock:
            self._closed = True
            sync, self._sync = self._sync, None
            clients = list(self._async.items())
            self._async.clear()
        if sync is not None:
            sync.close()
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        mine: list[AsyncTurnkeeperClient] = []
        for loop, client in clients:
            if loop is current:
                mine.append(client)
            elif loop.is_running():
                # A loop in another thread: close there, without waiting for it.
                asyncio.run_coroutine_threadsafe(client.close(), loop)
            # A loop that is not running has no call in flight on the channel, and
            # is not ours to run; dropping the client lets grpc close the core
            # channel when it is collected (grpc.aio.Channel.__del__).
        return mine


class RemoteSaver(ExtendedSaverMethods, BaseCheckpointSaver[str]):
    """A LangGraph checkpointer storing in the turnkeeper service's CheckpointService.

    ``RemoteSaver()`` connects to ``$TURNKEEPER_ADDRESS`` (default
    ``127.0.0.1:50051``); ``address`` overrides ``options.target``. Errors are
    :mod:`turnkeeper.errors` exceptions; a fenced write raises ``StaleAttempt``.
    """

    def __init__(
        self,
        address: str | None = None,
        *,
        options: ConnectionOptions | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        super().__init__(serde=serde)
        options = options if options is not None else ConnectionOptions()
        if address is not None:
            options = dataclasses.replace(options, target=address)
        self.options = options
        self._channels = _Channels(options)

    @classmethod
    @contextmanager
    def from_address(
        cls,
        address: str | None = None,
        *,
        options: ConnectionOptions | None = None,
        serde: SerializerProtocol | None = None,
    ) -> Iterator[Self]:
        """A saver closed on exit, like ``SqliteSaver.from_conn_string``::

        with RemoteSaver.from_address("127.0.0.1:50051") as saver:
            graph = builder.compile(checkpointer=saver)
        """
        saver = cls(address, options=options, serde=serde)
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

    # Requests and replies, shared by the sync and async methods.

    @staticmethod
    def _get_request(config: RunnableConfig) -> checkpoints_pb2.GetCheckpointRequest:
        configurable = config["configurable"]
        return checkpoints_pb2.GetCheckpointRequest(
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=configurable.get("checkpoint_ns", ""),
            checkpoint_id=get_checkpoint_id(config) or "",
        )

    @staticmethod
    def _list_request(
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> checkpoints_pb2.ListCheckpointsRequest | None:
        """None when SqliteSaver would return nothing whatever is stored (limit=0,
        a ``before`` config without a checkpoint id)."""
        request = checkpoints_pb2.ListCheckpointsRequest()
        if config is not None:
            configurable = config["configurable"]
            request.thread_id = str(configurable["thread_id"])
            checkpoint_ns = configurable.get("checkpoint_ns")
            if checkpoint_ns is not None:
                request.checkpoint_ns = checkpoint_ns
            request.checkpoint_id = get_checkpoint_id(config) or ""
        if filter:
            # SqliteSaver compares values it cannot express in JSON as str(value).
            request.filter_json = json.dumps(filter, ensure_ascii=False, default=str)
        if before is not None:
            before_id = get_checkpoint_id(before)
            if not before_id:
                # SqliteSaver compares `checkpoint_id < NULL`, which matches nothing.
                return None
            request.before_checkpoint_id = before_id
        if limit is not None:
            # SQLite's LIMIT: 0 returns no rows and a negative one means no limit,
            # which is what the proto's 0 means.
            if limit == 0:
                return None
            request.limit = max(limit, 0)
        return request

    def _put_request(
        self, config: RunnableConfig, checkpoint: Checkpoint, metadata: CheckpointMetadata
    ) -> tuple[checkpoints_pb2.PutCheckpointRequest, RunnableConfig]:
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        type_, data = self.serde.dumps_typed(checkpoint)
        # Exactly SqliteSaver's column: its .encode("utf-8", "ignore") drops lone
        # surrogates, which a proto string could not carry anyway.
        metadata_json = (
            json.dumps(get_checkpoint_metadata(config, metadata), ensure_ascii=False)
            .encode("utf-8", "ignore")
            .decode("utf-8")
        )
        request = checkpoints_pb2.PutCheckpointRequest(
            thread_id=str(thread_id),
            checkpoint_ns=checkpoint_ns,
            checkpoint_id=checkpoint["id"],
            parent_checkpoint_id=configurable.get("checkpoint_id") or "",
            checkpoint=checkpoints_pb2.TypedValue(type=type_, data=data),
            metadata_json=metadata_json,
        )
        if (fence := _fence(config)) is not None:
            request.fence.CopyFrom(fence)
        stored: RunnableConfig = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": checkpoint_ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
        return request, stored

    def _writes_request(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> checkpoints_pb2.PutWritesRequest:
        configurable = config["configurable"]
        request = checkpoints_pb2.PutWritesRequest(
            thread_id=str(configurable["thread_id"]),
            checkpoint_ns=str(configurable.get("checkpoint_ns", "")),
            checkpoint_id=str(configurable["checkpoint_id"]),
            task_id=task_id,
            task_path=task_path,
            # SqliteSaver: INSERT OR REPLACE when every channel is a special one
            # (an error, an interrupt ... supersedes the previous one), otherwise
            # INSERT OR IGNORE (a task's writes are stored once).
            replace=all(channel in WRITES_IDX_MAP for channel, _ in writes),
        )
        for idx, (channel, value) in enumerate(writes):
            type_, data = self.serde.dumps_typed(value)
            request.writes.append(
                checkpoints_pb2.WriteInput(
                    idx=WRITES_IDX_MAP.get(channel, idx),
                    channel=channel,
                    value=checkpoints_pb2.TypedValue(type=type_, data=data),
                )
            )
        if (fence := _fence(config)) is not None:
            request.fence.CopyFrom(fence)
        return request

    def _tuple(
        self, stored: checkpoints_pb2.CheckpointTuple, config: RunnableConfig | None
    ) -> CheckpointTuple:
        """The CheckpointTuple SqliteSaver would build from the same rows. ``config``:
        the caller's config when it named the checkpoint (get_tuple returns it as
        given), else None to build it from the stored ref."""
        ref = stored.ref
        if config is None:
            config = {
                "configurable": {
                    "thread_id": ref.thread_id,
                    "checkpoint_ns": ref.checkpoint_ns,
                    "checkpoint_id": ref.checkpoint_id,
                }
            }
        parent_config: RunnableConfig | None = None
        if stored.parent_checkpoint_id:
            parent_config = {
                "configurable": {
                    "thread_id": ref.thread_id,
                    "checkpoint_ns": ref.checkpoint_ns,
                    "checkpoint_id": stored.parent_checkpoint_id,
                }
            }
        # BaseCheckpointSaver's contract: pending writes in writes_sort_key order,
        # whatever order they came over the wire in.
        writes = sorted(
            stored.pending_writes, key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx)
        )
        pending: builtins.list[PendingWrite] = [
            (w.task_id, w.channel, self.serde.loads_typed((w.value.type, w.value.data)))
            for w in writes
        ]
        return CheckpointTuple(
            config=config,
            checkpoint=self.serde.loads_typed((stored.checkpoint.type, stored.checkpoint.data)),
            metadata=cast(
                CheckpointMetadata, json.loads(stored.metadata_json) if stored.metadata_json else {}
            ),
            parent_config=parent_config,
            pending_writes=pending,
        )

    def _found(
        self, config: RunnableConfig, response: checkpoints_pb2.GetCheckpointResponse
    ) -> CheckpointTuple | None:
        if not response.found:
            return None
        # Like SqliteSaver: a config that named its checkpoint is returned as given.
        return self._tuple(response.checkpoint, config if get_checkpoint_id(config) else None)

    # Sync API

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """The checkpoint ``config`` names, or the thread's newest in its namespace."""
        response = self._channels.sync().get_checkpoint(self._get_request(config))
        return self._found(config, response)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints, newest first (descending checkpoint_id), with their writes."""
        request = self._list_request(config, filter, before, limit)
        if request is None:
            return
        for response in self._channels.sync().list_checkpoints(request):
            yield self._tuple(response.checkpoint, None)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; its parent is the checkpoint ``config`` names."""
        request, stored = self._put_request(config, checkpoint, metadata)
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
        self._channels.sync().put_writes(self._writes_request(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of the thread."""
        self._channels.sync().delete_thread(
            checkpoints_pb2.DeleteThreadRequest(thread_id=str(thread_id))
        )

    # Async API

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async :meth:`get_tuple`."""
        response = await self._channels.aio().get_checkpoint(self._get_request(config))
        return self._found(config, response)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async :meth:`list`."""
        request = self._list_request(config, filter, before, limit)
        if request is None:
            return
        async for response in self._channels.aio().list_checkpoints(request):
            yield self._tuple(response.checkpoint, None)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async :meth:`put`."""
        request, stored = self._put_request(config, checkpoint, metadata)
        await self._channels.aio().put_checkpoint(request)
        return stored

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
        request = self._writes_request(config, writes, task_id, task_path)
        await self._channels.aio().put_writes(request)

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
