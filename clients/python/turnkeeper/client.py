"""Typed clients for the turnkeeper service: :class:`AsyncTurnkeeperClient` (grpc.aio)
and :class:`TurnkeeperClient` (blocking).

Both are thin: one method per RPC of ``TurnService``, ``CheckpointService`` and
``OperationsService``, taking the request message and returning the response
message (or an iterator of them for the streaming RPCs). The methods are declared
once, in the table of ``_Rpcs``; each client supplies how a call is made (awaited or
blocking). What they add over the
generated stubs:

- connection set-up from one :class:`ConnectionOptions` (target, TLS, bearer token,
  default deadline, message size limit);
- several replicas in one target, calls spread over them, and a bounded retry of
  *idempotent* RPCs on UNAVAILABLE that lands on a replica still up (see
  :mod:`turnkeeper._connection`);
- gRPC errors raised as :mod:`turnkeeper.errors` exceptions;
- ``with`` / ``async with`` and a ``close()`` that is safe to call twice.

The target defaults to ``$TURNKEEPER_ADDRESS``, else ``127.0.0.1:50051``.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator
from types import TracebackType
from typing import Any, Final, Generic, Protocol, Self, TypeVar, overload

import grpc
import grpc.aio
from google.protobuf.message import Message

from turnkeeper import _tracing as tracing
from turnkeeper._caller_assertion import METADATA as ASSERTION_METADATA
from turnkeeper._connection import ADDRESS_ENV, DEFAULT_ADDRESS, ConnectionOptions, default_address
from turnkeeper.errors import TurnkeeperError, from_rpc_error
from turnkeeper.v1 import checkpoints_pb2 as cp
from turnkeeper.v1 import operations_pb2 as op
from turnkeeper.v1 import store_pb2 as sp
from turnkeeper.v1 import turns_pb2 as tp

__all__ = [
    "ADDRESS_ENV",
    "DEFAULT_ADDRESS",
    "AsyncTurnkeeperClient",
    "ConnectionOptions",
    "TurnkeeperClient",
    "default_address",
]

_TURNS: Final = "turnkeeper.v1.TurnService"
_CHECKPOINTS: Final = "turnkeeper.v1.CheckpointService"
_OPERATIONS: Final = "turnkeeper.v1.OperationsService"
_STORE: Final = "turnkeeper.v1.StoreService"
# gRPC metadata: whom a bridge acts for (the service's audit log records it).
ON_BEHALF_OF: Final = "turnkeeper-on-behalf-of"

# Not in the table below: RemoteSaver's per-run stream, opened by open_checkpoint_stream.
CHECKPOINT_STREAM: Final = f"/{_CHECKPOINTS}/CheckpointStream"

_Req = TypeVar("_Req", bound=Message)
_Resp = TypeVar("_Resp", bound=Message)
_ReqIn = TypeVar("_ReqIn", contravariant=True)
_RespOut = TypeVar("_RespOut", covariant=True)


class AsyncUnary(Protocol[_ReqIn, _RespOut]):
    def __call__(
        self, request: _ReqIn, *, timeout: float | None = None
    ) -> Coroutine[Any, Any, _RespOut]: ...


class SyncUnary(Protocol[_ReqIn, _RespOut]):
    def __call__(self, request: _ReqIn, *, timeout: float | None = None) -> _RespOut: ...


class AsyncStream(Protocol[_ReqIn, _RespOut]):
    def __call__(
        self, request: _ReqIn, *, timeout: float | None = None
    ) -> AsyncIterator[_RespOut]: ...


class SyncStream(Protocol[_ReqIn, _RespOut]):
    def __call__(self, request: _ReqIn, *, timeout: float | None = None) -> Iterator[_RespOut]: ...


class _Rpc(Generic[_Req, _Resp]):
    """One row of the table: an RPC, its messages, and (streams) whether the default
    deadline applies. A descriptor: on a client it is that client's call of the RPC."""

    def __init__(
        self,
        service: str,
        method: str,
        request: type[_Req],
        response: type[_Resp],
        *,
        default_deadline: bool = True,
        doc: str = "",
    ) -> None:
        self.service = service
        self.method = method
        self.request = request
        self.response = response
        self.default_deadline = default_deadline
        self.__doc__ = doc or f"``{service.rsplit('.', 1)[-1]}/{method}``."

    @property
    def path(self) -> str:
        return f"/{self.service}/{self.method}"


class _Unary(_Rpc[_Req, _Resp]):
    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, client: AsyncTurnkeeperClient, owner: type[Any]
    ) -> AsyncUnary[_Req, _Resp]: ...
    @overload
    def __get__(self, client: TurnkeeperClient, owner: type[Any]) -> SyncUnary[_Req, _Resp]: ...
    def __get__(self, client: _Base | None, owner: type[Any]) -> Any:
        if client is None:
            return self

        def call(request: _Req, *, timeout: float | None = None) -> Any:
            return client._call_unary(self, request, timeout)

        return call


class _Stream(_Rpc[_Req, _Resp]):
    @overload
    def __get__(self, client: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, client: AsyncTurnkeeperClient, owner: type[Any]
    ) -> AsyncStream[_Req, _Resp]: ...
    @overload
    def __get__(self, client: TurnkeeperClient, owner: type[Any]) -> SyncStream[_Req, _Resp]: ...
    def __get__(self, client: _Base | None, owner: type[Any]) -> Any:
        if client is None:
            return self

        def call(request: _Req, *, timeout: float | None = None) -> Any:
            if timeout is None and self.default_deadline:
                timeout = client.options.default_timeout
            return client._call_stream(self, request, timeout)

        return call


class _Rpcs:
    """The one table of RPC methods, shared by both clients."""

    # TurnService
    start_turn = _Unary(_TURNS, "StartTurn", tp.StartTurnRequest, tp.StartTurnResponse)
    turn_status = _Unary(_TURNS, "TurnStatus", tp.TurnStatusRequest, tp.TurnStatusResponse)
    get_turn = _Unary(_TURNS, "GetTurn", tp.GetTurnRequest, tp.GetTurnResponse)
    list_turns = _Unary(_TURNS, "ListTurns", tp.ListTurnsRequest, tp.ListTurnsResponse)
    list_events = _Unary(_TURNS, "ListEvents", tp.ListEventsRequest, tp.ListEventsResponse)
    heartbeat = _Unary(_TURNS, "Heartbeat", tp.HeartbeatRequest, tp.HeartbeatResponse)
    append_events = _Unary(_TURNS, "AppendEvents", tp.AppendEventsRequest, tp.AppendEventsResponse)
    park_turn = _Unary(_TURNS, "ParkTurn", tp.ParkTurnRequest, tp.ParkTurnResponse)
    finish_turn = _Unary(_TURNS, "FinishTurn", tp.FinishTurnRequest, tp.FinishTurnResponse)
    resume_detached = _Unary(
        _TURNS, "ResumeDetached", tp.ResumeDetachedRequest, tp.ResumeDetachedResponse
    )
    redrive = _Unary(_TURNS, "Redrive", tp.RedriveRequest, tp.RedriveResponse)
    claim_turn = _Unary(_TURNS, "ClaimTurn", tp.ClaimTurnRequest, tp.ClaimTurnResponse)
    cancel_turn = _Unary(_TURNS, "CancelTurn", tp.CancelTurnRequest, tp.CancelTurnResponse)
    begin_effect = _Unary(_TURNS, "BeginEffect", tp.BeginEffectRequest, tp.BeginEffectResponse)
    record_effect = _Unary(_TURNS, "RecordEffect", tp.RecordEffectRequest, tp.RecordEffectResponse)
    list_effects = _Unary(_TURNS, "ListEffects", tp.ListEffectsRequest, tp.ListEffectsResponse)
    list_agents = _Unary(_TURNS, "ListAgents", tp.ListAgentsRequest, tp.ListAgentsResponse)
    migrate_turns = _Unary(_TURNS, "MigrateTurns", tp.MigrateTurnsRequest, tp.MigrateTurnsResponse)
    watch_turn = _Stream(
        _TURNS,
        "WatchTurn",
        tp.WatchTurnRequest,
        tp.WatchTurnResponse,
        default_deadline=False,
        doc="The turn's frames until its terminal event. No default deadline: the stream "
        "lasts as long as the turn. Not retried: on an error, watch again with "
        "``after_seq`` set to the last seq seen.",
    )
    # CheckpointService
    get_checkpoint = _Unary(
        _CHECKPOINTS, "GetCheckpoint", cp.GetCheckpointRequest, cp.GetCheckpointResponse
    )
    list_checkpoints = _Stream(
        _CHECKPOINTS, "ListCheckpoints", cp.ListCheckpointsRequest, cp.ListCheckpointsResponse
    )
    put_checkpoint = _Unary(
        _CHECKPOINTS, "PutCheckpoint", cp.PutCheckpointRequest, cp.PutCheckpointResponse
    )
    put_writes = _Unary(_CHECKPOINTS, "PutWrites", cp.PutWritesRequest, cp.PutWritesResponse)
    delete_thread = _Unary(
        _CHECKPOINTS, "DeleteThread", cp.DeleteThreadRequest, cp.DeleteThreadResponse
    )
    prune_threads = _Unary(
        _CHECKPOINTS, "PruneThreads", cp.PruneThreadsRequest, cp.PruneThreadsResponse
    )
    delete_for_runs = _Unary(
        _CHECKPOINTS, "DeleteForRuns", cp.DeleteForRunsRequest, cp.DeleteForRunsResponse
    )
    copy_thread = _Unary(_CHECKPOINTS, "CopyThread", cp.CopyThreadRequest, cp.CopyThreadResponse)
    # OperationsService
    introspect = _Unary(
        _OPERATIONS,
        "Introspect",
        op.IntrospectRequest,
        op.IntrospectResponse,
        doc="Who a bearer token is, and which bridge JSON-RPC methods it may call.",
    )
    issue_assertion = _Unary(
        _OPERATIONS,
        "IssueAssertion",
        op.IssueAssertionRequest,
        op.IssueAssertionResponse,
        doc="A caller assertion for one request to an agent's bridge on NATS "
        "(turnkeeper._caller_assertion): sent instead of the bearer token.",
    )
    list_audit = _Unary(_OPERATIONS, "ListAudit", op.ListAuditRequest, op.ListAuditResponse)
    # StoreService
    store_batch = _Unary(
        _STORE,
        "StoreBatch",
        sp.StoreBatchRequest,
        sp.StoreBatchResponse,
        doc="LangGraph store operations (BaseStore.batch), in order, in one transaction.",
    )


class _Base(_Rpcs, abc.ABC):
    def __init__(self, options: ConnectionOptions | None) -> None:
        self.options = options if options is not None else ConnectionOptions()
        self._metadata = self.options.call_metadata()
        self._callables: dict[str, Any] = {}

    def _timeout(self, timeout: float | None) -> float | None:
        return self.options.default_timeout if timeout is None else timeout

    def _callable(self, channel: grpc.Channel | grpc.aio.Channel, rpc: _Rpc[Any, Any]) -> Any:
        """The channel's multi-callable for `rpc`, made once per channel."""
        found = self._callables.get(rpc.path)
        if found is None:
            make = channel.unary_stream if isinstance(rpc, _Stream) else channel.unary_unary
            found = make(
                rpc.path,
                request_serializer=rpc.request.SerializeToString,
                response_deserializer=rpc.response.FromString,
            )
            self._callables[rpc.path] = found
        return found

    # How a call is made is the sync or async client's own.
    @abc.abstractmethod
    def _call_unary(self, rpc: _Rpc[_Req, _Resp], request: _Req, timeout: float | None) -> Any: ...

    @abc.abstractmethod
    def _call_stream(self, rpc: _Rpc[_Req, _Resp], request: _Req, timeout: float | None) -> Any: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}(target={self.options.target!r})"


class AsyncTurnkeeperClient(_Base):
    """grpc.aio client. Every method takes the request message and an optional
    ``timeout`` in seconds (default: ``options.default_timeout``). It is the gRPC
    deadline, sent with the call so that the service stops working on an expired
    call too, which ``asyncio.timeout`` around the call would not do.

    The channel is opened on first use and belongs to the event loop running then;
    a grpc.aio channel cannot be shared between loops, so use one client per loop.
    """

    def __init__(self, options: ConnectionOptions | None = None) -> None:
        super().__init__(options)
        self._channel: grpc.aio.Channel | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the channel belongs to; None before first use."""
        return self._loop

    def _open(self) -> grpc.aio.Channel:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        if self._channel is not None:
            if loop is not self._loop:
                raise RuntimeError(
                    f"{self!r} was opened in another event loop; use one client per loop"
                )
            return self._channel
        target = self.options.channel_target()
        options = self.options.channel_options(target)
        credentials = self.options.credentials()
        # A span per RPC only while an OpenTelemetry SDK is installed (_tracing.py).
        interceptors = tracing.client_interceptors() or None
        if credentials is None:
            channel = grpc.aio.insecure_channel(
                target.target, options=options, interceptors=interceptors
            )
        else:
            channel = grpc.aio.secure_channel(
                target.target, credentials, options=options, interceptors=interceptors
            )
        self._channel = channel
        self._loop = loop
        return channel

    async def start_turn_on_behalf(
        self,
        request: tp.StartTurnRequest,
        on_behalf_of: str,
        *,
        assertion: str = "",
        timeout: float | None = None,
    ) -> tp.StartTurnResponse:
        """StartTurn for a caller (a bridge: its JSON-RPC caller). `assertion`: the
        caller assertion the service signed for that request
        (turnkeeper._caller_assertion): the service then applies the caller's rights
        too (an interrupt, a rollback or a regenerate needs CancelTurn's) and names
        it in the audit log. `on_behalf_of` names it where there is none."""
        response: tp.StartTurnResponse = await self._on_behalf(
            _Rpcs.start_turn, "StartTurn", request, on_behalf_of, assertion, timeout
        )
        return response

    async def resume_detached_on_behalf(
        self,
        request: tp.ResumeDetachedRequest,
        on_behalf_of: str,
        *,
        assertion: str = "",
        timeout: float | None = None,
    ) -> tp.ResumeDetachedResponse:
        """ResumeDetached for a caller, as start_turn_on_behalf."""
        response: tp.ResumeDetachedResponse = await self._on_behalf(
            _Rpcs.resume_detached, "ResumeDetached", request, on_behalf_of, assertion, timeout
        )
        return response

    async def cancel_turn_on_behalf(
        self,
        request: tp.CancelTurnRequest,
        on_behalf_of: str,
        *,
        assertion: str = "",
        timeout: float | None = None,
    ) -> tp.CancelTurnResponse:
        """CancelTurn for a caller, as start_turn_on_behalf."""
        response: tp.CancelTurnResponse = await self._on_behalf(
            _Rpcs.cancel_turn, "CancelTurn", request, on_behalf_of, assertion, timeout
        )
        return response

    async def _on_behalf(
        self,
        rpc: Any,
        name: str,
        request: Any,
        on_behalf_of: str,
        assertion: str,
        timeout: float | None,
    ) -> Any:
        method = self._callable(self._open(), rpc)
        metadata = (*self._metadata, (ON_BEHALF_OF, on_behalf_of))
        if assertion:
            metadata += ((ASSERTION_METADATA, assertion),)
        try:
            return await method(request, timeout=self._timeout(timeout), metadata=metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc=name) from err

    async def _call_unary(
        self, rpc: _Rpc[_Req, _Resp], request: _Req, timeout: float | None
    ) -> _Resp:
        method = self._callable(self._open(), rpc)
        try:
            response: _Resp = await method(
                request, timeout=self._timeout(timeout), metadata=self._metadata
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc=rpc.method) from err
        return response

    def _call_stream(
        self, rpc: _Rpc[_Req, _Resp], request: _Req, timeout: float | None
    ) -> AsyncIterator[_Resp]:
        return self._stream(rpc.method, self._callable(self._open(), rpc), request, timeout)

    async def _stream(
        self,
        rpc: str,
        method: grpc.aio.UnaryStreamMultiCallable[_Req, _Resp],
        request: _Req,
        timeout: float | None,
    ) -> AsyncIterator[_Resp]:
        call = method(request, timeout=timeout, metadata=self._metadata)
        try:
            async for response in call:
                yield response
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc=rpc) from err
        except asyncio.CancelledError:
            if not cancelled_under(call):
                raise
            raise TurnkeeperError(
                grpc.StatusCode.CANCELLED, "the call was cancelled: its client was closed", rpc=rpc
            ) from None
        finally:
            # A consumer that stops early must not leave the stream open.
            call.cancel()

    def open_checkpoint_stream(
        self,
    ) -> grpc.aio.StreamStreamCall[cp.CheckpointStreamRequest, cp.CheckpointStreamResponse]:
        """Open CheckpointService.CheckpointStream (what RemoteSaver runs a graph run
        on). It has no deadline: it lives as long as the run; the caller bounds each
        answer it waits for."""
        method = self._open().stream_stream(
            CHECKPOINT_STREAM,
            request_serializer=cp.CheckpointStreamRequest.SerializeToString,
            response_deserializer=cp.CheckpointStreamResponse.FromString,
        )
        return method(None, metadata=self._metadata)

    async def close(self) -> None:
        """Close the channel, cancelling calls in flight. Safe to call twice."""
        self._closed = True
        channel, self._channel = self._channel, None
        self._callables.clear()
        if channel is not None:
            await channel.close(None)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def cancelled_under(call: grpc.aio.Call) -> bool:
    """Whether grpc's CancelledError out of reading `call` is the call's end, not
    the reading task's. grpc ends a call cancelled in this process (its channel
    closed by another task: `close`) with CancelledError, not RpcError: unless the
    reading task itself is being cancelled, the reader must not end as if it were
    (decision 762; the checkpoint stream's reader did, decision 720)."""
    task = asyncio.current_task()
    return task is not None and not task.cancelling() and call.cancelled()


class TurnkeeperClient(_Base):
    """Blocking client, same methods as :class:`AsyncTurnkeeperClient`. The channel
    is opened at construction and may be shared between threads."""

    def __init__(self, options: ConnectionOptions | None = None) -> None:
        super().__init__(options)
        target = self.options.channel_target()
        channel_options = self.options.channel_options(target)
        credentials = self.options.credentials()
        if credentials is None:
            channel = grpc.insecure_channel(target.target, options=channel_options)
        else:
            channel = grpc.secure_channel(target.target, credentials, options=channel_options)
        self._channel: grpc.Channel | None = channel
        self._open_channel: grpc.Channel = channel

    def _call_unary(self, rpc: _Rpc[_Req, _Resp], request: _Req, timeout: float | None) -> _Resp:
        method = self._callable(self._open_channel, rpc)
        try:
            response: _Resp = method(
                request, timeout=self._timeout(timeout), metadata=self._metadata
            )
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc=rpc.method) from err
        return response

    def _call_stream(
        self, rpc: _Rpc[_Req, _Resp], request: _Req, timeout: float | None
    ) -> Iterator[_Resp]:
        return self._stream(rpc.method, self._callable(self._open_channel, rpc), request, timeout)

    def _stream(
        self,
        rpc: str,
        method: grpc.UnaryStreamMultiCallable[_Req, _Resp],
        request: _Req,
        timeout: float | None,
    ) -> Iterator[_Resp]:
        call = method(request, timeout=timeout, metadata=self._metadata)
        try:
            yield from call
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc=rpc) from err
        finally:
            # A consumer that stops early must not leave the stream open.
            call.cancel()  # type: ignore[no-untyped-call]  # unannotated in grpc-stubs

    def close(self) -> None:
        """Close the channel, cancelling calls in flight. Safe to call twice."""
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
