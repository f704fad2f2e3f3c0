"""CheckpointService: validation and proto conversion over the engine's checkpoints."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from grpc import aio
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc

from turnkeeper_server import audit as audit_log
from turnkeeper_server import limits as lim
from turnkeeper_server.audit import AuditLog
from turnkeeper_server.engine import Engine
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal import maintenance
from turnkeeper_server.journal.checkpoints import CheckpointWrite
from turnkeeper_server.limits import Limits
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.operations.threads import ThreadOperations
from turnkeeper_server.records import Fence
from turnkeeper_server.security import auth
from turnkeeper_server.store.records import (
    CheckpointPut,
    CheckpointQuery,
    CheckpointRow,
    WritesPut,
)

Ctx = aio.ServicerContext[object, object]

# Namespaces are "" (root) or subgraph paths like "child:<task id>|grandchild:<id>".
MAX_NS = 1024


@dataclass(frozen=True, slots=True)
class PreparedWrite:
    """A checkpoint write validated and authorized, and the bytes it counts in the
    metrics once committed."""

    write: CheckpointWrite
    size: int


class CheckpointServicer(checkpoints_pb2_grpc.CheckpointServiceServicer):
    def __init__(
        self,
        engine: Engine,
        limits: Limits,
        metrics: Metrics,
        audit: AuditLog | None = None,
        threads: ThreadOperations | None = None,
    ) -> None:
        self.engine = engine
        self.limits = limits
        self.metrics = metrics
        self.audit = audit
        # DeleteThread and CopyThread are the operations the LangGraph API's thread
        # delete and copy call too, and the rule for which threads a caller uses is
        # theirs (operations/threads.py: one rule for both surfaces).
        self.threads = threads or ThreadOperations(engine, limits, audit)

    def _thread(self, thread_id: str) -> str:
        return lim.check_id("thread_id", thread_id, self.limits)

    def _own_thread(self, thread_id: str) -> None:
        """The caller may use the thread: ThreadOperations' rule, the LangGraph
        API's too (a thread it owns, or one only its own agent's turns run on)."""
        self.threads.require(thread_id)

    def _name(self, name: str, value: str) -> str:
        return lim.check_length(name, value, self.limits.max_name_length)

    def _ns(self, ns: str) -> str:
        if len(ns) > MAX_NS:
            raise InvalidArgument(f"checkpoint_ns is {len(ns)} characters; the limit is {MAX_NS}")
        return ns

    def _fence(self, fence: checkpoints_pb2.TurnFence, present: bool) -> Fence | None:
        if not present:
            return None
        if fence.attempt < 0:
            raise InvalidArgument("fence.attempt must not be negative")
        turn_id = lim.check_id("fence.turn_id", fence.turn_id, self.limits)
        # Another agent's turn is not found, not "on another thread" (which would leak).
        auth.require_turn(turn_id, lambda: self.engine.turns.get(turn_id))
        return Fence(turn_id, fence.attempt)

    async def GetCheckpoint(
        self, request: checkpoints_pb2.GetCheckpointRequest, context: Ctx
    ) -> checkpoints_pb2.GetCheckpointResponse:
        thread_id = self._thread(request.thread_id)
        ns = self._ns(request.checkpoint_ns)
        checkpoint_id = lim.check_optional_id("checkpoint_id", request.checkpoint_id, self.limits)
        self._own_thread(thread_id)
        row = await self.engine.checkpoints.get(thread_id, ns, checkpoint_id)
        if row is None:
            return checkpoints_pb2.GetCheckpointResponse(found=False)
        return checkpoints_pb2.GetCheckpointResponse(found=True, checkpoint=_tuple(row))

    async def ListCheckpoints(
        self, request: checkpoints_pb2.ListCheckpointsRequest, context: Ctx
    ) -> AsyncIterator[checkpoints_pb2.ListCheckpointsResponse]:
        if request.limit < 0:
            raise InvalidArgument("limit must not be negative")
        thread_id = lim.check_optional_id("thread_id", request.thread_id, self.limits)
        if request.filter_json:
            lim.check_json_text(
                "filter_json",
                request.filter_json,
                self.limits.max_filter_bytes,
                self.limits.max_json_depth,
            )
        self._own_thread(thread_id)
        query = CheckpointQuery(
            thread_id=thread_id,
            checkpoint_ns=self._ns(request.checkpoint_ns)
            if request.HasField("checkpoint_ns")
            else None,
            checkpoint_id=lim.check_optional_id(
                "checkpoint_id", request.checkpoint_id, self.limits
            ),
            filter_json=request.filter_json,
            before_checkpoint_id=lim.check_optional_id(
                "before_checkpoint_id", request.before_checkpoint_id, self.limits
            ),
            limit=request.limit,
        )
        for row in await self.engine.checkpoints.search(query):
            yield checkpoints_pb2.ListCheckpointsResponse(checkpoint=_tuple(row))

    def prepare_put(self, request: checkpoints_pb2.PutCheckpointRequest) -> PreparedWrite:
        """A PutCheckpoint validated and authorized: the engine's arguments."""
        thread_id = self._thread(request.thread_id)
        ns = self._ns(request.checkpoint_ns)
        checkpoint_id = lim.check_id("checkpoint_id", request.checkpoint_id, self.limits)
        parent = lim.check_optional_id(
            "parent_checkpoint_id", request.parent_checkpoint_id, self.limits
        )
        self._name("checkpoint.type", request.checkpoint.type)
        size = len(request.checkpoint.data) + len(request.metadata_json)
        lim.check_size("checkpoint", size, self.limits.max_checkpoint_bytes)
        lim.check_json_text(
            "metadata_json",
            request.metadata_json or "{}",
            self.limits.max_checkpoint_bytes,
            self.limits.max_json_depth,
        )
        self._own_thread(thread_id)
        fence = self._fence(request.fence, request.HasField("fence"))
        put = CheckpointPut(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            parent_checkpoint_id=parent,
            type=request.checkpoint.type,
            blob=request.checkpoint.data,
            metadata_json=request.metadata_json or "{}",
        )
        return PreparedWrite(CheckpointWrite(put, fence), size)

    def put_answer(
        self, prepared: PreparedWrite, last_seq: int | None
    ) -> checkpoints_pb2.PutCheckpointResponse:
        """The answer to a committed PutCheckpoint (and its count in the metrics);
        `last_seq`: the turn's, recorded as the checkpoint's boundary."""
        self.metrics.checkpoint_bytes.inc(prepared.size)
        put = prepared.write.row
        return checkpoints_pb2.PutCheckpointResponse(
            ref=checkpoints_pb2.CheckpointRef(
                thread_id=put.thread_id,
                checkpoint_ns=put.checkpoint_ns,
                checkpoint_id=put.checkpoint_id,
            ),
            last_seq=last_seq or 0,
        )

    async def PutCheckpoint(
        self, request: checkpoints_pb2.PutCheckpointRequest, context: Ctx
    ) -> checkpoints_pb2.PutCheckpointResponse:
        prepared = self.prepare_put(request)
        last_seq = await self.engine.checkpoints.write(prepared.write)
        return self.put_answer(prepared, last_seq)

    def prepare_writes(self, request: checkpoints_pb2.PutWritesRequest) -> PreparedWrite:
        """A PutWrites validated and authorized: the engine's arguments."""
        thread_id = self._thread(request.thread_id)
        ns = self._ns(request.checkpoint_ns)
        checkpoint_id = lim.check_id("checkpoint_id", request.checkpoint_id, self.limits)
        if not request.task_id:
            raise InvalidArgument("task_id is required")
        lim.check_length("task_id", request.task_id, self.limits.max_id_length)
        lim.check_length("task_path", request.task_path, MAX_NS)
        if len(request.writes) > self.limits.max_writes_per_call:
            raise InvalidArgument(
                f"{len(request.writes)} writes in one call; the limit is {self.limits.max_writes_per_call}"
            )
        size = sum(len(w.value.data) for w in request.writes)
        lim.check_size("writes", size, self.limits.max_checkpoint_bytes)
        writes = []
        for w in request.writes:
            if not w.channel:
                raise InvalidArgument("every write needs a channel")
            self._name("write channel", w.channel)
            self._name("write value.type", w.value.type)
            writes.append((w.idx, w.channel, w.value.type, w.value.data))
        self._own_thread(thread_id)
        fence = self._fence(request.fence, request.HasField("fence"))
        put = WritesPut(
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            task_id=request.task_id,
            task_path=request.task_path,
            writes=writes,
            replace=request.replace,
        )
        made: frozenset[str] | None = None
        if request.settle_effects:
            if fence is None:
                raise InvalidArgument("settle_effects needs a fence: effects belong to a turn")
            for key in request.effect_keys:
                lim.check_length("effect key", key, self.limits.max_id_length)
            made = frozenset(request.effect_keys)
        return PreparedWrite(CheckpointWrite(put, fence, made), size)

    def writes_answer(self, prepared: PreparedWrite) -> checkpoints_pb2.PutWritesResponse:
        """The answer to a committed PutWrites (and its count in the metrics)."""
        self.metrics.checkpoint_bytes.inc(prepared.size)
        return checkpoints_pb2.PutWritesResponse()

    async def PutWrites(
        self, request: checkpoints_pb2.PutWritesRequest, context: Ctx
    ) -> checkpoints_pb2.PutWritesResponse:
        prepared = self.prepare_writes(request)
        await self.engine.checkpoints.write(prepared.write)
        return self.writes_answer(prepared)

    async def DeleteThread(
        self, request: checkpoints_pb2.DeleteThreadRequest, context: Ctx
    ) -> checkpoints_pb2.DeleteThreadResponse:
        return await self.threads.erase(request, context)

    # -- LangGraph's extended saver operations (journal/maintenance.py) ----------------

    def _ids(self, name: str, values: Sequence[str]) -> list[str]:
        if len(values) > MAX_IDS:
            raise InvalidArgument(f"{len(values)} {name} in one call; the limit is {MAX_IDS}")
        return [lim.check_id(name, v, self.limits) for v in values]

    async def PruneThreads(
        self, request: checkpoints_pb2.PruneThreadsRequest, context: Ctx
    ) -> checkpoints_pb2.PruneThreadsResponse:
        thread_ids = self._ids("thread_ids", request.thread_ids)
        strategy = _PRUNE.get(request.strategy)
        if strategy is None:
            raise InvalidArgument("strategy must be KEEP_LATEST or DELETE (or unset)")
        async with audit_log.audited(
            self.audit, audit_log.PRUNE_THREADS, ",".join(thread_ids), context
        ):
            for thread_id in thread_ids:
                self._own_thread(thread_id)
            deleted = await self.engine.checkpoints.prune_threads(thread_ids, strategy)
        return checkpoints_pb2.PruneThreadsResponse(checkpoints_deleted=deleted)

    async def DeleteForRuns(
        self, request: checkpoints_pb2.DeleteForRunsRequest, context: Ctx
    ) -> checkpoints_pb2.DeleteForRunsResponse:
        run_ids = [
            lim.check_length("run_ids", r, self.limits.max_name_length) for r in request.run_ids
        ]
        if len(run_ids) > MAX_IDS:
            raise InvalidArgument(f"{len(run_ids)} run_ids in one call; the limit is {MAX_IDS}")
        async with audit_log.audited(
            self.audit, audit_log.DELETE_FOR_RUNS, ",".join(run_ids), context
        ):
            deleted = await self.engine.checkpoints.delete_for_runs(run_ids)
        return checkpoints_pb2.DeleteForRunsResponse(checkpoints_deleted=deleted)

    async def CopyThread(
        self, request: checkpoints_pb2.CopyThreadRequest, context: Ctx
    ) -> checkpoints_pb2.CopyThreadResponse:
        copied = await self.threads.copy(request, context)
        owner = auth.acting_identity()
        if owner:
            # A thread made over gRPC is its maker's, as one made over HTTP (decision
            # 310); a target that exists keeps its owner.
            await self.engine.threads.ensure(request.target_thread_id, {}, owner)
        return copied


_PRUNE = {
    checkpoints_pb2.PRUNE_STRATEGY_UNSPECIFIED: maintenance.KEEP_LATEST,
    checkpoints_pb2.PRUNE_STRATEGY_KEEP_LATEST: maintenance.KEEP_LATEST,
    checkpoints_pb2.PRUNE_STRATEGY_DELETE: maintenance.DELETE,
}

# Ids in one PruneThreads or DeleteForRuns call.
MAX_IDS = 1000


def _tuple(row: CheckpointRow) -> checkpoints_pb2.CheckpointTuple:
    return checkpoints_pb2.CheckpointTuple(
        ref=checkpoints_pb2.CheckpointRef(
            thread_id=row.thread_id,
            checkpoint_ns=row.checkpoint_ns,
            checkpoint_id=row.checkpoint_id,
        ),
        parent_checkpoint_id=row.parent_checkpoint_id or "",
        checkpoint=checkpoints_pb2.TypedValue(type=row.type or "", data=row.checkpoint or b""),
        metadata_json=(row.metadata or b"{}").decode("utf-8", "replace"),
        pending_writes=[
            checkpoints_pb2.PendingWrite(
                task_id=w.task_id,
                channel=w.channel,
                value=checkpoints_pb2.TypedValue(type=w.type or "", data=w.value or b""),
                task_path=w.task_path,
                idx=w.idx,
            )
            for w in row.writes
        ],
    )
