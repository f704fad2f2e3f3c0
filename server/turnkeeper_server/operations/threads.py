"""The operations on a thread that both surfaces offer: erase it, copy its
checkpoints. CheckpointService's DeleteThread and CopyThread (rpc/) and the
LangGraph API's thread delete and copy (web/langgraph/) are each a translation of
these; the audit record is taken here, around the thread's access check.

Which threads an agent token may use differs by surface, and each surface passes
its rule (`Access`): CheckpointService's is `ThreadOperations.own` (the threads
with its own agent's turns, auth.require_thread), the LangGraph API's is
ownership (auth.sees_thread: the threads the caller made, or its own agent's
turns run on; a thread not made yet, a copy's target, is the caller's to make;
web/langgraph/api.py).
"""

from __future__ import annotations

from collections.abc import Callable

from turnkeeper.v1 import checkpoints_pb2

from turnkeeper_server import audit as audit_log
from turnkeeper_server import limits as lim
from turnkeeper_server.audit import AuditLog
from turnkeeper_server.engine import Engine
from turnkeeper_server.limits import Limits
from turnkeeper_server.operations.origin import Origin
from turnkeeper_server.security import auth

# A surface's rule for the threads the current caller may use: raises when it may not.
Access = Callable[[str], None]


class ThreadOperations:
    def __init__(self, engine: Engine, limits: Limits, audit: AuditLog | None = None) -> None:
        self.engine = engine
        self.limits = limits
        self.audit = audit

    def own(self, thread_id: str) -> None:
        """An agent token uses its own agent's threads only (auth.py)."""
        auth.require_thread(thread_id, lambda: self.engine.turns.thread_agents(thread_id))

    async def erase(
        self,
        request: checkpoints_pb2.DeleteThreadRequest,
        origin: Origin | None,
        access: Access,
    ) -> checkpoints_pb2.DeleteThreadResponse:
        """Every row of the thread in one transaction; with `cancel`, a live turn is
        cancelled in the same one (journal/erasure.py)."""
        thread_id = lim.check_id("thread_id", request.thread_id, self.limits)
        async with audit_log.audited(self.audit, audit_log.DELETE_THREAD, thread_id, origin):
            access(thread_id)
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
        access: Access,
    ) -> checkpoints_pb2.CopyThreadResponse:
        source = lim.check_id("source_thread_id", request.source_thread_id, self.limits)
        target = lim.check_id("target_thread_id", request.target_thread_id, self.limits)
        async with audit_log.audited(
            self.audit, audit_log.COPY_THREAD, f"{source} -> {target}", origin
        ):
            access(source)
            access(target)
            copied = await self.engine.checkpoints.copy_thread(source, target)
        return checkpoints_pb2.CopyThreadResponse(checkpoints_copied=copied)
