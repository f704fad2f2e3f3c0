"""The operations on a turn that both surfaces offer: read it, list its events,
watch it (with WatchTurn's quota), cancel it, delete it.

Inputs and outputs are the proto messages of TurnService, so the gRPC servicer
(rpc/turn_service.py) is a one-line call of each and the HTTP side (web/) calls the
same ones; a turn's rights (`auth.require_turn`: an agent token sees its own
agent's turns only) and the audit record are taken here, on either surface. The
right to call a method at all is each surface's own check (the gRPC interceptor,
`web/auth.require`), since it is named after the surface's method.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator
from typing import Final

from turnkeeper.v1 import turns_pb2

from turnkeeper_server import audit as audit_log
from turnkeeper_server import limits as lim
from turnkeeper_server.audit import AuditLog
from turnkeeper_server.engine import Engine, Reset
from turnkeeper_server.errors import InvalidArgument, NotFound
from turnkeeper_server.limits import Limits
from turnkeeper_server.operations.convert import event_to_proto, turn_to_proto
from turnkeeper_server.operations.origin import Origin, acting_for
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.assertions import Assertions

MAX_REASON_BYTES: Final = 1000
# Deleting a run erases history, as deleting its thread does: DeleteThread's right.
DELETE_RUN_RIGHT: Final = "/turnkeeper.v1.CheckpointService/DeleteThread"


class TurnOperations:
    def __init__(
        self,
        engine: Engine,
        limits: Limits,
        audit: AuditLog | None = None,
        assertions: Assertions | None = None,
        *,
        owners_edit_state: bool = False,
    ) -> None:
        self.engine = engine
        self.limits = limits
        self.audit = audit
        # Whether a thread's owner may edit its state (--owners-edit-state; decision
        # 309): answering its interrupt it may always.
        self.owners_edit_state = owners_edit_state
        # Reads the caller assertions bridges pass on (None without tokens).
        self.assertions = assertions
        # One quota for WatchTurn on gRPC and the event streams on HTTP.
        self.watch_streams = lim.StreamQuota(
            "WatchTurn streams", limits.max_watch_streams_per_client, "max_watch_streams_per_client"
        )

    def turn_id(self, value: str) -> str:
        return lim.check_id("turn_id", value, self.limits)

    def acting_for(self, origin: Origin | None, method: str) -> None:
        """The caller assertion a bridge passed on for `method` (origin.py)."""
        acting_for(self.assertions, origin, method)

    def own(self, turn_id: str) -> None:
        """An agent token acts on its own agent's turns only (auth.py)."""
        auth.require_turn(turn_id, lambda: self.engine.turns.get(turn_id))

    def owner(self, thread_id: str) -> str:
        """Who owns the thread (auth.identity of its maker); "" when no one does."""
        record = self.engine.threads.get_now(thread_id)
        return record.owner if record is not None else ""

    def require_on_thread(self, right: str, thread_id: str, what: str) -> None:
        """The caller, and whom a bridge acts for, hold `right` on the thread: by
        role, or as its owner where owners hold it (auth.owner_may); one rule for
        both surfaces."""
        auth.require_on_behalf(
            right, what, self.owner(thread_id), owners_edit_state=self.owners_edit_state
        )

    def require_answer(self, turn_id: str) -> None:
        """The caller, and whom a bridge acts for, may answer the turn's interrupt:
        operators, admins and agents (on their own turns, `own`) by role; the owner
        of the turn's thread on it. PERMISSION_DENIED, whether the turn is unknown or
        on a thread the caller does not own."""
        caller, behalf = auth.current(), auth.acting_for()
        held = auth.RIGHTS[auth.ANSWER_INTERRUPT]
        if caller is None or (caller.role in held and (behalf is None or behalf.role in held)):
            return
        turn = self.engine.turns.get(turn_id)
        auth.require_on_behalf(
            auth.ANSWER_INTERRUPT,
            f"answer the interrupt of turn {turn_id!r}",
            self.owner(turn.thread_id) if turn is not None else "",
            owners_edit_state=self.owners_edit_state,
        )

    def visible(self, turn_id: str) -> TurnRecord:
        """The turn; NOT_FOUND, worded as for an unknown one, for a turn the caller
        may not read (auth.sees_turn: to an agent token another agent's, to a panel
        one on a thread it does not own): one rule for gRPC, Connect, SSE and the
        LangGraph API's runs."""
        turn = self.engine.turns.require(self.turn_id(turn_id))
        caller = auth.current()
        if caller is not None and not auth.sees_turn(
            caller, turn.agent, "" if caller.role == auth.AGENT else self.owner(turn.thread_id)
        ):
            raise NotFound(f"turn {turn.turn_id!r} is not in the journal")
        return turn

    def get(self, request: turns_pb2.GetTurnRequest) -> turns_pb2.GetTurnResponse:
        turn = self.visible(request.turn_id)
        return turns_pb2.GetTurnResponse(turn=turn_to_proto(turn, *self.engine.turns.explain(turn)))

    def list_events(self, request: turns_pb2.ListEventsRequest) -> turns_pb2.ListEventsResponse:
        turn = self.visible(request.turn_id)
        if request.after_seq < 0:
            raise InvalidArgument("after_seq must not be negative")
        size = lim.page_size(request.page_size, self.limits.max_page_size, self.limits)
        events = self.engine.turns.events(turn.turn_id, request.after_seq, size)
        return turns_pb2.ListEventsResponse(
            events=[event_to_proto(e) for e in events], last_seq=turn.last_seq
        )

    async def cancel(
        self, request: turns_pb2.CancelTurnRequest, origin: Origin | None
    ) -> turns_pb2.CancelTurnResponse:
        turn_id = self.turn_id(request.turn_id)
        self.acting_for(origin, auth.JSONRPC_CANCEL)
        async with audit_log.audited(self.audit, audit_log.CANCEL, turn_id, origin):
            # Ownership first: another agent's turn is NOT_FOUND whatever the request.
            self.own(turn_id)
            lim.check_size("reason", len(request.reason.encode()), MAX_REASON_BYTES)
            cancelled = await self.engine.turns.cancel(
                turn_id=turn_id, rollback=request.rollback, detail=request.reason
            )
        return turns_pb2.CancelTurnResponse(
            turn=turn_to_proto(cancelled.turn), checkpoints_removed=cancelled.checkpoints_removed
        )

    def watch_quota(self, origin: auth.Peer) -> contextlib.AbstractContextManager[None]:
        """A slot of WatchTurn's quota for the caller at `origin`, held while its
        stream is open; RESOURCE_EXHAUSTED when it has none left (decision 187)."""
        return self.watch_streams.hold(auth.client_key(origin))

    async def watch(
        self, request: turns_pb2.WatchTurnRequest, *, after_attempt: int | None = None
    ) -> AsyncGenerator[turns_pb2.WatchTurnResponse, None]:
        """The turn's frames from `after_seq` on, without the quota: the gRPC
        servicer holds it around this, the HTTP side before it answers 200, so a
        client over it gets 429 (decision 187). `after_attempt`: the attempt of the
        event at `after_seq` the client has (the SSE's resume; engine/watch.py
        `follow`)."""
        turn_id = self.visible(request.turn_id).turn_id
        if request.after_seq < 0:
            raise InvalidArgument("after_seq must not be negative")
        # When a watcher leaves while a frame is being sent, grpc does not cancel its
        # handler: it stops iterating it and closes it at its `yield`. aclosing() then
        # closes the engine's stream too, at once, not whenever it is collected.
        async with contextlib.aclosing(
            self.engine.turns.watch(turn_id, request.after_seq, after_attempt=after_attempt)
        ) as frames:
            async for frame in frames:
                if isinstance(frame, Reset):
                    yield turns_pb2.WatchTurnResponse(reset=_reset(frame))
                else:
                    yield turns_pb2.WatchTurnResponse(event=event_to_proto(frame))

    async def delete(self, turn_id: str, origin: Origin | None) -> None:
        """A finished turn's rows: its events and boundaries (the LangGraph API's
        run delete; WrongState while it may still run)."""
        auth.require_right(DELETE_RUN_RIGHT)
        async with audit_log.audited(self.audit, audit_log.DELETE_RUN, turn_id, origin):
            await self.engine.turns.delete(turn_id)


def _reset(frame: Reset) -> turns_pb2.Reset:
    return turns_pb2.Reset(seq=frame.seq, attempt=frame.attempt, checkpoint_id=frame.checkpoint_id)
