"""Typed clients for the turnkeeper service: :class:`AsyncTurnkeeperClient` (grpc.aio)
and :class:`TurnkeeperClient` (blocking).

Both are thin: one method per RPC of ``TurnService`` and ``CheckpointService``, taking
the request message and returning the response message (or an iterator of them for
the streaming RPCs). What they add over the generated stubs:

- connection set-up from one :class:`ConnectionOptions` (target, TLS, bearer token,
  default deadline, message size limit);
- a bounded retry of *idempotent* RPCs on UNAVAILABLE (see ``_RETRIED``);
- gRPC errors raised as :mod:`turnkeeper.errors` exceptions;
- ``with`` / ``async with`` and a ``close()`` that is safe to call twice.

The target defaults to ``$TURNKEEPER_ADDRESS``, else ``127.0.0.1:50051``.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from importlib import metadata as _metadata
from pathlib import Path
from types import TracebackType
from typing import Final, Self, TypeVar

import grpc
import grpc.aio

from turnkeeper.errors import from_rpc_error
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc

__all__ = [
    "ADDRESS_ENV",
    "DEFAULT_ADDRESS",
    "AsyncTurnkeeperClient",
    "ConnectionOptions",
    "TurnkeeperClient",
    "default_address",
]

ADDRESS_ENV: Final = "TURNKEEPER_ADDRESS"
DEFAULT_ADDRESS: Final = "127.0.0.1:50051"

_TURNS: Final = "turnkeeper.v1.TurnService"
_CHECKPOINTS: Final = "turnkeeper.v1.CheckpointService"

# The RPCs the client retries on UNAVAILABLE. Only those for which running twice is
# the same as running once:
# - reads: TurnStatus, GetTurn, ListTurns, ListEvents, GetCheckpoint, ListCheckpoints;
# - idempotent by design: StartTurn (by turn_id, for the same request), AppendEvents
#   (by (turn_id, attempt, seq): a batch already stored is skipped), PutCheckpoint
#   (by checkpoint id, replaces the row with the same content) and PutWrites (by
#   (task_id, idx)).
#
# Never retried automatically, because each is a compare-and-set on the turn's state
# and UNAVAILABLE does not say whether the first try committed (the service may have
# applied it and then lost the connection): a retried ResumeDetached, ParkTurn,
# FinishTurn, ClaimTurn or CancelTurn that had committed finds the turn already moved on and
# reports FAILED_PRECONDITION (or ABORTED) for what was a success, and a retried
# Redrive re-drives a second time (attempts+2, a second rewind). The caller checks
# GetTurn/TurnStatus and decides. Also not retried: Heartbeat (the next beat is the
# retry), WatchTurn (the caller reconnects with after_seq, which the stream supports)
# and DeleteThread, PruneThreads, DeleteForRuns, CopyThread (idempotent alone, but a
# late retry could delete or overwrite a checkpoint another writer stored in between).
#
# Why grpc's service-config retry policy rather than a loop of our own: it is one
# declaration shared by the sync and the aio channel; grpc-core applies it with
# jittered exponential backoff, counts every attempt against the call's one deadline
# (so a retried call never outlives its timeout), caps attempts at 5, and retries a
# server stream only until its first message, where a hand-written loop would have
# to re-implement each of these twice.
_RETRIED: Final[tuple[tuple[str, str], ...]] = (
    (_TURNS, "StartTurn"),
    (_TURNS, "TurnStatus"),
    (_TURNS, "GetTurn"),
    (_TURNS, "ListTurns"),
    (_TURNS, "ListEvents"),
    (_TURNS, "AppendEvents"),
    (_CHECKPOINTS, "GetCheckpoint"),
    (_CHECKPOINTS, "ListCheckpoints"),
    (_CHECKPOINTS, "PutCheckpoint"),
    (_CHECKPOINTS, "PutWrites"),
)

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


def default_address() -> str:
    """``$TURNKEEPER_ADDRESS`` if set and not empty, else ``127.0.0.1:50051``."""
    return os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS


def _user_agent() -> str:
    try:
        version = _metadata.version("turnkeeper")
    except _metadata.PackageNotFoundError:  # running from a source tree
        version = "0"
    return f"turnkeeper-python/{version}"


def _duration(seconds: float) -> str:
    """A google.protobuf.Duration in its JSON form, as service configs spell it."""
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


@dataclass(frozen=True, slots=True)
class ConnectionOptions:
    """How to reach the service.

    Plaintext unless ``tls`` is set or a certificate path is given. With TLS and no
    ``root_certificates`` the system's roots are used; ``client_certificate`` and
    ``client_key`` (both or neither) are for mutual TLS. Paths are read when a
    channel is opened.
    """

    target: str = field(default_factory=default_address)
    tls: bool = False
    root_certificates: str | os.PathLike[str] | None = None
    client_certificate: str | os.PathLike[str] | None = None
    client_key: str | os.PathLike[str] | None = None
    # Sent on every call as `authorization: Bearer <token>`.
    bearer_token: str | None = None
    # Deadline of a call that does not give its own timeout. None: no deadline.
    # WatchTurn, which lasts as long as the turn, never gets this default.
    default_timeout: float | None = 30.0
    # Both directions. The service enforces its own (smaller) payload limits and
    # answers INVALID_ARGUMENT; this only keeps grpc's 4 MiB default out of the way.
    max_message_bytes: int = 64 * 1024 * 1024
    # Retry policy of the idempotent RPCs on UNAVAILABLE; grpc caps attempts at 5.
    # max_attempts=1 disables retries.
    retry_max_attempts: int = 5
    retry_initial_backoff: float = 0.1
    retry_max_backoff: float = 2.0

    def __post_init__(self) -> None:
        if (self.client_certificate is None) != (self.client_key is None):
            raise ValueError("client_certificate and client_key go together")
        if self.retry_max_attempts < 1:
            raise ValueError("retry_max_attempts must be at least 1")
        if self.retry_initial_backoff <= 0 or self.retry_max_backoff <= 0:
            raise ValueError("retry backoffs must be positive")
        if self.default_timeout is not None and self.default_timeout <= 0:
            raise ValueError("default_timeout must be positive or None")

    @property
    def secure(self) -> bool:
        return self.tls or self.root_certificates is not None or self.client_certificate is not None

    def credentials(self) -> grpc.ChannelCredentials | None:
        """TLS credentials, or None for a plaintext channel."""
        if not self.secure:
            return None

        def read(path: str | os.PathLike[str] | None) -> bytes | None:
            return None if path is None else Path(path).read_bytes()

        return grpc.ssl_channel_credentials(
            root_certificates=read(self.root_certificates),
            private_key=read(self.client_key),
            certificate_chain=read(self.client_certificate),
        )

    def service_config(self) -> str:
        """The channel's service config: the retry policy of ``_RETRIED``."""
        method_config: list[dict[str, object]] = []
        if self.retry_max_attempts > 1:
            method_config.append(
                {
                    "name": [{"service": s, "method": m} for s, m in _RETRIED],
                    "retryPolicy": {
                        "maxAttempts": self.retry_max_attempts,
                        "initialBackoff": _duration(self.retry_initial_backoff),
                        "maxBackoff": _duration(self.retry_max_backoff),
                        "backoffMultiplier": 2,
                        "retryableStatusCodes": ["UNAVAILABLE"],
                    },
                }
            )
        return json.dumps({"methodConfig": method_config})

    def channel_options(self) -> list[tuple[str, object]]:
        return [
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.enable_retries", 1),
            ("grpc.service_config", self.service_config()),
            ("grpc.primary_user_agent", _user_agent()),
        ]

    def call_metadata(self) -> tuple[tuple[str, str], ...]:
        if self.bearer_token is None:
            return ()
        return (("authorization", f"Bearer {self.bearer_token}"),)


class _Base:
    def __init__(self, options: ConnectionOptions | None) -> None:
        self.options = options if options is not None else ConnectionOptions()
        self._metadata = self.options.call_metadata()

    def _timeout(self, timeout: float | None) -> float | None:
        return self.options.default_timeout if timeout is None else timeout

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
        self._turns: turns_pb2_grpc.TurnServiceAsyncStub | None = None
        self._checkpoints: checkpoints_pb2_grpc.CheckpointServiceAsyncStub | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop the channel belongs to; None before first use."""
        return self._loop

    def _open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self!r} is closed")
        loop = asyncio.get_running_loop()
        if self._channel is not None:
            if loop is not self._loop:
                raise RuntimeError(
                    f"{self!r} was opened in another event loop; use one client per loop"
                )
            return
        options = self.options.channel_options()
        credentials = self.options.credentials()
        if credentials is None:
            channel = grpc.aio.insecure_channel(self.options.target, options=options)
        else:
            channel = grpc.aio.secure_channel(self.options.target, credentials, options=options)
        self._channel = channel
        self._loop = loop
        self._turns = turns_pb2_grpc.TurnServiceStub(channel)
        self._checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)

    def _turn_stub(self) -> turns_pb2_grpc.TurnServiceAsyncStub:
        self._open()
        assert self._turns is not None
        return self._turns

    def _checkpoint_stub(self) -> checkpoints_pb2_grpc.CheckpointServiceAsyncStub:
        self._open()
        assert self._checkpoints is not None
        return self._checkpoints

    async def _unary(
        self,
        rpc: str,
        method: grpc.aio.UnaryUnaryMultiCallable[_Req, _Resp],
        request: _Req,
        timeout: float | None,
    ) -> _Resp:
        try:
            return await method(request, timeout=self._timeout(timeout), metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc=rpc) from err

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
        finally:
            # A consumer that stops early must not leave the stream open.
            call.cancel()

    async def close(self) -> None:
        """Close the channel, cancelling calls in flight. Safe to call twice."""
        self._closed = True
        channel, self._channel = self._channel, None
        self._turns = self._checkpoints = None
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

    # TurnService

    async def start_turn(
        self, request: turns_pb2.StartTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.StartTurnResponse:
        stub = self._turn_stub()
        return await self._unary("StartTurn", stub.StartTurn, request, timeout)

    async def turn_status(
        self, request: turns_pb2.TurnStatusRequest, *, timeout: float | None = None
    ) -> turns_pb2.TurnStatusResponse:
        stub = self._turn_stub()
        return await self._unary("TurnStatus", stub.TurnStatus, request, timeout)

    async def get_turn(
        self, request: turns_pb2.GetTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.GetTurnResponse:
        stub = self._turn_stub()
        return await self._unary("GetTurn", stub.GetTurn, request, timeout)

    async def list_turns(
        self, request: turns_pb2.ListTurnsRequest, *, timeout: float | None = None
    ) -> turns_pb2.ListTurnsResponse:
        stub = self._turn_stub()
        return await self._unary("ListTurns", stub.ListTurns, request, timeout)

    async def list_events(
        self, request: turns_pb2.ListEventsRequest, *, timeout: float | None = None
    ) -> turns_pb2.ListEventsResponse:
        stub = self._turn_stub()
        return await self._unary("ListEvents", stub.ListEvents, request, timeout)

    async def heartbeat(
        self, request: turns_pb2.HeartbeatRequest, *, timeout: float | None = None
    ) -> turns_pb2.HeartbeatResponse:
        stub = self._turn_stub()
        return await self._unary("Heartbeat", stub.Heartbeat, request, timeout)

    async def append_events(
        self, request: turns_pb2.AppendEventsRequest, *, timeout: float | None = None
    ) -> turns_pb2.AppendEventsResponse:
        stub = self._turn_stub()
        return await self._unary("AppendEvents", stub.AppendEvents, request, timeout)

    async def park_turn(
        self, request: turns_pb2.ParkTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.ParkTurnResponse:
        stub = self._turn_stub()
        return await self._unary("ParkTurn", stub.ParkTurn, request, timeout)

    async def finish_turn(
        self, request: turns_pb2.FinishTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.FinishTurnResponse:
        stub = self._turn_stub()
        return await self._unary("FinishTurn", stub.FinishTurn, request, timeout)

    async def resume_detached(
        self, request: turns_pb2.ResumeDetachedRequest, *, timeout: float | None = None
    ) -> turns_pb2.ResumeDetachedResponse:
        stub = self._turn_stub()
        return await self._unary("ResumeDetached", stub.ResumeDetached, request, timeout)

    async def redrive(
        self, request: turns_pb2.RedriveRequest, *, timeout: float | None = None
    ) -> turns_pb2.RedriveResponse:
        stub = self._turn_stub()
        return await self._unary("Redrive", stub.Redrive, request, timeout)

    async def claim_turn(
        self, request: turns_pb2.ClaimTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.ClaimTurnResponse:
        stub = self._turn_stub()
        return await self._unary("ClaimTurn", stub.ClaimTurn, request, timeout)

    async def cancel_turn(
        self, request: turns_pb2.CancelTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.CancelTurnResponse:
        stub = self._turn_stub()
        return await self._unary("CancelTurn", stub.CancelTurn, request, timeout)

    def watch_turn(
        self, request: turns_pb2.WatchTurnRequest, *, timeout: float | None = None
    ) -> AsyncIterator[turns_pb2.WatchTurnResponse]:
        """The turn's frames until its terminal event. No default deadline: the
        stream lasts as long as the turn. Not retried: on an error, watch again
        with ``after_seq`` set to the last seq seen."""
        stub = self._turn_stub()
        return self._stream("WatchTurn", stub.WatchTurn, request, timeout)

    # CheckpointService

    async def get_checkpoint(
        self, request: checkpoints_pb2.GetCheckpointRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.GetCheckpointResponse:
        stub = self._checkpoint_stub()
        return await self._unary("GetCheckpoint", stub.GetCheckpoint, request, timeout)

    def list_checkpoints(
        self, request: checkpoints_pb2.ListCheckpointsRequest, *, timeout: float | None = None
    ) -> AsyncIterator[checkpoints_pb2.ListCheckpointsResponse]:
        stub = self._checkpoint_stub()
        return self._stream(
            "ListCheckpoints", stub.ListCheckpoints, request, self._timeout(timeout)
        )

    async def put_checkpoint(
        self, request: checkpoints_pb2.PutCheckpointRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.PutCheckpointResponse:
        stub = self._checkpoint_stub()
        return await self._unary("PutCheckpoint", stub.PutCheckpoint, request, timeout)

    async def put_writes(
        self, request: checkpoints_pb2.PutWritesRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.PutWritesResponse:
        stub = self._checkpoint_stub()
        return await self._unary("PutWrites", stub.PutWrites, request, timeout)

    async def delete_thread(
        self, request: checkpoints_pb2.DeleteThreadRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.DeleteThreadResponse:
        stub = self._checkpoint_stub()
        return await self._unary("DeleteThread", stub.DeleteThread, request, timeout)

    async def prune_threads(
        self, request: checkpoints_pb2.PruneThreadsRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.PruneThreadsResponse:
        stub = self._checkpoint_stub()
        return await self._unary("PruneThreads", stub.PruneThreads, request, timeout)

    async def delete_for_runs(
        self, request: checkpoints_pb2.DeleteForRunsRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.DeleteForRunsResponse:
        stub = self._checkpoint_stub()
        return await self._unary("DeleteForRuns", stub.DeleteForRuns, request, timeout)

    async def copy_thread(
        self, request: checkpoints_pb2.CopyThreadRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.CopyThreadResponse:
        stub = self._checkpoint_stub()
        return await self._unary("CopyThread", stub.CopyThread, request, timeout)


class TurnkeeperClient(_Base):
    """Blocking client, same methods as :class:`AsyncTurnkeeperClient`. The channel
    is opened at construction and may be shared between threads."""

    def __init__(self, options: ConnectionOptions | None = None) -> None:
        super().__init__(options)
        channel_options = self.options.channel_options()
        credentials = self.options.credentials()
        if credentials is None:
            channel = grpc.insecure_channel(self.options.target, options=channel_options)
        else:
            channel = grpc.secure_channel(self.options.target, credentials, options=channel_options)
        self._channel: grpc.Channel | None = channel
        self._turns = turns_pb2_grpc.TurnServiceStub(channel)
        self._checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)

    def _unary(
        self,
        rpc: str,
        method: grpc.UnaryUnaryMultiCallable[_Req, _Resp],
        request: _Req,
        timeout: float | None,
    ) -> _Resp:
        try:
            return method(request, timeout=self._timeout(timeout), metadata=self._metadata)
        except grpc.RpcError as err:
            raise from_rpc_error(err, rpc=rpc) from err

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

    # TurnService

    def start_turn(
        self, request: turns_pb2.StartTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.StartTurnResponse:
        return self._unary("StartTurn", self._turns.StartTurn, request, timeout)

    def turn_status(
        self, request: turns_pb2.TurnStatusRequest, *, timeout: float | None = None
    ) -> turns_pb2.TurnStatusResponse:
        return self._unary("TurnStatus", self._turns.TurnStatus, request, timeout)

    def get_turn(
        self, request: turns_pb2.GetTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.GetTurnResponse:
        return self._unary("GetTurn", self._turns.GetTurn, request, timeout)

    def list_turns(
        self, request: turns_pb2.ListTurnsRequest, *, timeout: float | None = None
    ) -> turns_pb2.ListTurnsResponse:
        return self._unary("ListTurns", self._turns.ListTurns, request, timeout)

    def list_events(
        self, request: turns_pb2.ListEventsRequest, *, timeout: float | None = None
    ) -> turns_pb2.ListEventsResponse:
        return self._unary("ListEvents", self._turns.ListEvents, request, timeout)

    def heartbeat(
        self, request: turns_pb2.HeartbeatRequest, *, timeout: float | None = None
    ) -> turns_pb2.HeartbeatResponse:
        return self._unary("Heartbeat", self._turns.Heartbeat, request, timeout)

    def append_events(
        self, request: turns_pb2.AppendEventsRequest, *, timeout: float | None = None
    ) -> turns_pb2.AppendEventsResponse:
        return self._unary("AppendEvents", self._turns.AppendEvents, request, timeout)

    def park_turn(
        self, request: turns_pb2.ParkTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.ParkTurnResponse:
        return self._unary("ParkTurn", self._turns.ParkTurn, request, timeout)

    def finish_turn(
        self, request: turns_pb2.FinishTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.FinishTurnResponse:
        return self._unary("FinishTurn", self._turns.FinishTurn, request, timeout)

    def resume_detached(
        self, request: turns_pb2.ResumeDetachedRequest, *, timeout: float | None = None
    ) -> turns_pb2.ResumeDetachedResponse:
        return self._unary("ResumeDetached", self._turns.ResumeDetached, request, timeout)

    def redrive(
        self, request: turns_pb2.RedriveRequest, *, timeout: float | None = None
    ) -> turns_pb2.RedriveResponse:
        return self._unary("Redrive", self._turns.Redrive, request, timeout)

    def claim_turn(
        self, request: turns_pb2.ClaimTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.ClaimTurnResponse:
        return self._unary("ClaimTurn", self._turns.ClaimTurn, request, timeout)

    def cancel_turn(
        self, request: turns_pb2.CancelTurnRequest, *, timeout: float | None = None
    ) -> turns_pb2.CancelTurnResponse:
        return self._unary("CancelTurn", self._turns.CancelTurn, request, timeout)

    def watch_turn(
        self, request: turns_pb2.WatchTurnRequest, *, timeout: float | None = None
    ) -> Iterator[turns_pb2.WatchTurnResponse]:
        """See :meth:`AsyncTurnkeeperClient.watch_turn`."""
        return self._stream("WatchTurn", self._turns.WatchTurn, request, timeout)

    # CheckpointService

    def get_checkpoint(
        self, request: checkpoints_pb2.GetCheckpointRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.GetCheckpointResponse:
        return self._unary("GetCheckpoint", self._checkpoints.GetCheckpoint, request, timeout)

    def list_checkpoints(
        self, request: checkpoints_pb2.ListCheckpointsRequest, *, timeout: float | None = None
    ) -> Iterator[checkpoints_pb2.ListCheckpointsResponse]:
        return self._stream(
            "ListCheckpoints",
            self._checkpoints.ListCheckpoints,
            request,
            self._timeout(timeout),
        )

    def put_checkpoint(
        self, request: checkpoints_pb2.PutCheckpointRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.PutCheckpointResponse:
        return self._unary("PutCheckpoint", self._checkpoints.PutCheckpoint, request, timeout)

    def put_writes(
        self, request: checkpoints_pb2.PutWritesRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.PutWritesResponse:
        return self._unary("PutWrites", self._checkpoints.PutWrites, request, timeout)

    def delete_thread(
        self, request: checkpoints_pb2.DeleteThreadRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.DeleteThreadResponse:
        return self._unary("DeleteThread", self._checkpoints.DeleteThread, request, timeout)

    def prune_threads(
        self, request: checkpoints_pb2.PruneThreadsRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.PruneThreadsResponse:
        return self._unary("PruneThreads", self._checkpoints.PruneThreads, request, timeout)

    def delete_for_runs(
        self, request: checkpoints_pb2.DeleteForRunsRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.DeleteForRunsResponse:
        return self._unary("DeleteForRuns", self._checkpoints.DeleteForRuns, request, timeout)

    def copy_thread(
        self, request: checkpoints_pb2.CopyThreadRequest, *, timeout: float | None = None
    ) -> checkpoints_pb2.CopyThreadResponse:
        return self._unary("CopyThread", self._checkpoints.CopyThread, request, timeout)
