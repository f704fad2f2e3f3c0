"""The operations on a thread that both surfaces offer: erase it, copy its
checkpoints, and the one rule for which threads a caller may use. CheckpointService
(rpc/: every RPC naming a thread, DeleteThread and CopyThread) and the LangGraph
API's thread delete and copy (web/langgraph/) are each a translation of these; the
audit record is taken here, around the thread's access check.

The rule (`require`, decision 310) is the same on both surfaces: operators and
admins use every thread; another caller the threads it owns (auth.sees_thread:
the identity that made it, over HTTP, gRPC or NATS), and an agent token also the
threads on which only its own agent's turns run (it executes them); a thread not
made yet (no row, no turn: a copy's target) is the caller's to make. Refusals are
PERMISSION_DENIED with one message whether the thread is unknown or another's (the
LangGraph API answers NOT_FOUND before it gets here, as for any hidden thread).
"""

from __future__ import annotations

from turnkeeper.v1 import checkpoints_pb2

from turnkeeper_server import audit as audit_log
from turnkeeper_server import limits as lim
from turnkeeper_server.audit import AuditLog
from turnkeeper_server.engine import Engine
from turnkeeper_server.errors import PermissionDenied
from turnkeeper_server.limits import Limits
from turnkeeper_server.operations.origin import Origin
from turnkeeper_server.security import auth


class ThreadOperations:
    def __init__(self, engine: Engine, limits: Limits, audit: AuditLog | None = None) -> None:
        self.engine = engine
        self.limits = limits
        self.audit = audit

    def require(self, thread_id: str, *, making: bool = False) -> None:
        """The caller may use the thread (the module's rule); `making`: a thread
        not made yet is the caller's to make."""
        caller = auth.current()
        if auth.sees_every_thread(caller):
            return
        assert caller is not None
        if not thread_id:
            raise PermissionDenied(
                f"{caller} must name a thread_id: it may use its own threads only"
            )
        # An agent's own turns first: the common case on the checkpoint path, one
        # read that the executor's calls already make.
        agents = self.engine.turns.thread_agents(thread_id)
        if caller.role == auth.AGENT and agents == {caller.agent}:
            return
        record = self.engine.threads.get_now(thread_id)
        if record is not None and auth.sees_thread(caller, record.owner, lambda: agents):
            return
        if making and record is None and not agents:
            return
        raise PermissionDenied(f"thread {thread_id!r} is not open to {caller}")

    async def erase(
        self,
        request: checkpoints_pb2.DeleteThreadRequest,
        origin: Origin | None,
    ) -> checkpoints_pb2.DeleteThreadResponse:
        """Every row of the thread in one transaction; with `cancel`, a live turn is
        cancelled in the same one (journal/erasure.py)."""
        thread_id = lim.check_id("thread_id", request.thread_id, self.limits)
        async with audit_log.audited(self.audit, audit_log.DELETE_THREAD, thread_id, origin):
            self.require(thread_id)
            erased = await self.engine.turns.erase_thread(
                thread_id=thread_id, cancel=request.cancel
            )
        return checkpoints_pb2.DeleteThreadResponse(
            turns_deleted=erased.turns_deleted,
            cancelled_turn_id=erased.cancelled.turn.turn_id if erased.cancelled else "",
        )

    async def copy(
        self,
        request: checkpoints_pb2.CopyThreadRequest,
        origin: Origin | None,
    ) -> checkpoints_pb2.CopyThreadResponse:
        source = lim.check_id("source_thread_id", request.source_thread_id, self.limits)
        target = lim.check_id("target_thread_id", request.target_thread_id, self.limits)
        async with audit_log.audited(
            self.audit, audit_log.COPY_THREAD, f"{source} -> {target}", origin
        ):
            self.require(source)
            self.require(target, making=True)
            copied = await self.engine.checkpoints.copy_thread(source, target)
        return checkpoints_pb2.CopyThreadResponse(checkpoints_copied=copied)
