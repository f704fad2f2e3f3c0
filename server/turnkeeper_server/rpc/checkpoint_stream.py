"""CheckpointStream: one graph run's gets, puts, writes and event appends on one
open bidirectional stream.

Each message is handled by the very servicer method its unary RPC runs (same
validation, same authorization checks, same Engine call), after the check of the
caller's right to that RPC, so the stream behaves
like the unary calls on any store backend and costs the service one stream's
set-up instead of grpc's per-call machinery for every step.

Messages are handled one at a time, in the order they arrive, and each answer is
sent after its commit: events appended before a checkpoint on the same stream are
committed before it, which is the boundary rule by construction. A fenced message
(a stale attempt) ends the stream with ABORTED, as the unary call would answer,
and nothing after it on the stream is handled; any other refusal answers that
message alone and the stream goes on, so one bad request does not fail the
requests the client has pipelined behind it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from grpc import aio
from turnkeeper.v1 import checkpoints_pb2

from turnkeeper_server.audit import AuditLog
from turnkeeper_server.engine import Engine
from turnkeeper_server.errors import InvalidArgument, StaleAttempt, TurnkeeperError, status_for
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.rpc import limits as lim
from turnkeeper_server.rpc.checkpoint_service import CheckpointServicer
from turnkeeper_server.rpc.limits import Limits
from turnkeeper_server.rpc.turn_service import TurnServicer
from turnkeeper_server.security import auth

Ctx = aio.ServicerContext[object, object]
Request = checkpoints_pb2.CheckpointStreamRequest
Response = checkpoints_pb2.CheckpointStreamResponse

_OPS = "get, put, writes or append"

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
    ) -> None:
        super().__init__(engine, limits, metrics, audit)
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
            async for request in requests:
                try:
                    yield await self._one(request, context)
                except StaleAttempt:
                    # Ends the stream: ErrorsAndMetrics answers ABORTED with the message.
                    raise
                except TurnkeeperError as exc:
                    code, message = status_for(exc)
                    yield Response(
                        id=request.id,
                        error=checkpoints_pb2.StreamError(code=code.value[0], message=message),
                    )

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
