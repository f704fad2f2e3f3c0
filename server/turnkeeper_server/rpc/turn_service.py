"""TurnService: request validation and proto conversion over the engine."""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import AsyncIterator, Sequence

from google.protobuf import duration_pb2, struct_pb2
from grpc import aio
from turnkeeper import _multitask as multitask
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

from turnkeeper_server import audit as audit_log
from turnkeeper_server import limits as lim
from turnkeeper_server.audit import AuditLog
from turnkeeper_server.engine import Engine
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal import effects
from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.journal.start import StartRequest
from turnkeeper_server.journal.versions import Served
from turnkeeper_server.limits import Limits
from turnkeeper_server.operations.convert import (
    PROTO_TO_EFFECT_POLICY,
    PROTO_TO_STATE,
    STATE_TO_PROTO,
    effect_to_proto,
    timestamp,
    turn_to_proto,
    value_to_json,
    version_ref,
)
from turnkeeper_server.operations.origin import Origin
from turnkeeper_server.operations.start import start_turn
from turnkeeper_server.operations.turns import TurnOperations
from turnkeeper_server.records import (
    EFFECT_DONE,
    EFFECT_FAILED,
    EFFECT_RESOLVED,
    EffectCall,
    NewEvent,
)
from turnkeeper_server.security import auth
from turnkeeper_server.security.assertions import Assertions

Ctx = aio.ServicerContext[object, object]
# The methods browsers call over Connect too (web/connect.py `BrowserMethods`) take
# an `Origin` (operations/origin.py), which a gRPC context and the HTTP side's are.
# A graph fingerprint: SHA-256 in hex (docs/versions.md).
_FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")


class TurnServicer(turns_pb2_grpc.TurnServiceServicer):
    def __init__(
        self,
        engine: Engine,
        limits: Limits,
        audit: AuditLog | None = None,
        assertions: Assertions | None = None,
        operations: TurnOperations | None = None,
    ) -> None:
        self.engine = engine
        self.limits = limits
        self.audit = audit
        # What the HTTP side offers too (cancel, reads, the watch and its quota) is
        # one call of the operations beneath both surfaces (operations/turns.py).
        self.operations = operations or TurnOperations(engine, limits, audit, assertions)

    # -- validation helpers ---------------------------------------------------------

    def _id(self, name: str, value: str) -> str:
        return lim.check_id(name, value, self.limits)

    def _acting_for(self, context: Origin, method: str) -> None:
        """Whom a bridge acts for (operations/origin.py)."""
        self.operations.acting_for(context, method)

    def _own(self, turn_id: str) -> None:
        """An agent token acts on its own agent's turns only (auth.py)."""
        self.operations.own(turn_id)

    def _attempt(self, attempt: int) -> int:
        if attempt < 0:
            raise InvalidArgument("attempt must not be negative")
        return attempt

    def _value(self, name: str, value: struct_pb2.Value, limit: int) -> str:
        lim.check_size(name, value.ByteSize(), limit)
        try:
            text = value_to_json(value)
        except ValueError as exc:  # NaN or Infinity: JSON has no such numbers
            raise InvalidArgument(f"{name} is not valid JSON: {exc}") from None
        lim.check_size(name, len(text), limit)
        if value.WhichOneof("kind") in ("struct_value", "list_value"):
            lim.check_depth(name, json.loads(text), self.limits.max_json_depth)
        return text

    def _events(self, events: Sequence[turns_pb2.EventInput]) -> list[NewEvent]:
        limits = self.limits
        if len(events) > limits.max_events_per_batch:
            raise InvalidArgument(
                f"{len(events)} events in one call; the limit is {limits.max_events_per_batch}"
            )
        # Each field read once: every read of a protobuf string field builds a new str.
        fields = [(e.seq, e.type, e.data_json) for e in events]
        lim.check_size(
            "the batch of events",
            sum(len(data) + len(type_) for _, type_, data in fields),
            limits.max_batch_bytes,
        )
        max_bytes, max_depth = limits.max_event_bytes, limits.max_json_depth
        check_json = lim.check_json_text
        # The (seq, type, data_json) tuples above are the events handed on (NewEvent):
        # building a NamedTuple per event showed in the ingest profile.
        for i, (seq, type_, data) in enumerate(fields):
            if not type_ or len(type_) > 64:
                raise InvalidArgument(f"event seq {seq}: type must be 1 to 64 characters")
            if seq <= 0:
                raise InvalidArgument(f"event seq {seq}: seqs start at 1")
            if not data:
                data = "null"
                fields[i] = (seq, type_, data)
            try:
                check_json("", data, max_bytes, max_depth)
            except InvalidArgument:
                # Named only when refused: the f-string showed at ingest rates.
                check_json(f"event seq {seq} data_json", data, max_bytes, max_depth)
                raise
        return fields

    # -- RPCs -------------------------------------------------------------------------

    async def StartTurn(
        self, request: turns_pb2.StartTurnRequest, context: Ctx
    ) -> turns_pb2.StartTurnResponse:
        turn_id = self._id("turn_id", request.turn_id)
        thread_id = self._id("thread_id", request.thread_id)
        agent = lim.check_agent(request.agent, self.limits)
        replica = lim.check_optional_id("replica", request.replica, self.limits)
        incarnation = lim.check_optional_id("incarnation", request.incarnation, self.limits)
        if bool(replica) != bool(incarnation):
            raise InvalidArgument("replica and incarnation go together: give both or neither")
        input_json = self._value("input", request.input, self.limits.max_input_bytes)
        auth.require_agent(agent)
        auth.require_thread(
            thread_id,
            lambda: self.engine.turns.thread_agents(thread_id),
            starting=True,
        )
        try:
            strategy = multitask.from_wire(request.multitask_strategy)
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        max_run = _seconds("max_run_time", request.max_run_time)
        park_expiry = _seconds("park_expiry", request.park_expiry)
        self._acting_for(context, auth.JSONRPC_CREATE)
        served = _served(request.graph)
        start_request = StartRequest(
            turn_id=turn_id,
            thread_id=thread_id,
            agent=agent,
            input_json=input_json,
            replica=replica,
            incarnation=incarnation,
            strategy=strategy,
            max_run_seconds=max_run,
            park_expiry_seconds=park_expiry,
            require_announced=request.require_announced_agent,
            graph_fingerprint=served.fingerprint,
            graph_label=served.label,
            thread_owner=auth.acting_identity(),
        )
        started = await start_turn(self.operations, start_request, context)
        return turns_pb2.StartTurnResponse(
            turn=turn_to_proto(started.turn, self.engine.turns.detail(started.turn)),
            created=started.created,
            cancelled_turn_id=started.cancelled.turn.turn_id if started.cancelled else "",
        )

    async def CancelTurn(
        self, request: turns_pb2.CancelTurnRequest, context: Origin
    ) -> turns_pb2.CancelTurnResponse:
        return await self.operations.cancel(request, context)

    async def TurnStatus(
        self, request: turns_pb2.TurnStatusRequest, context: Origin
    ) -> turns_pb2.TurnStatusResponse:
        turn_id = self._id("turn_id", request.turn_id)
        # Another agent's turn is UNKNOWN to an agent token, like a never-seen id.
        turn = self.engine.turns.status(turn_id)
        if turn is None or not auth.sees_agent(turn.agent):
            return turns_pb2.TurnStatusResponse(turn_id=turn_id, state=turns_pb2.TURN_STATE_UNKNOWN)
        detail, waiting_for = self.engine.turns.status_explain(turn_id, turn)
        return turns_pb2.TurnStatusResponse(
            turn_id=turn_id,
            state=STATE_TO_PROTO[turn.state],
            attempts=turn.attempts,
            last_seq=turn.last_seq,
            error=turn.error,
            end_reason=turn.end_reason,
            detail=detail,
            waiting_for=None
            if waiting_for is None
            else version_ref(waiting_for.fingerprint, waiting_for.label),
        )

    async def GetTurn(
        self, request: turns_pb2.GetTurnRequest, context: Origin
    ) -> turns_pb2.GetTurnResponse:
        return self.operations.get(request)

    async def ListTurns(
        self, request: turns_pb2.ListTurnsRequest, context: Origin
    ) -> turns_pb2.ListTurnsResponse:
        size = lim.page_size(request.page_size, 100, self.limits)
        state = None
        if request.state not in (turns_pb2.TURN_STATE_UNSPECIFIED,):
            if request.state not in PROTO_TO_STATE:
                raise InvalidArgument(
                    "state filter must be RUNNING, PARKED, DONE, FAILED, CANCELLED or QUEUED"
                )
            state = PROTO_TO_STATE[request.state]
        lim.check_length("page_token", request.page_token, 64)
        before = _decode_token(request.page_token) if request.page_token else None
        rows = self.engine.turns.list_turns(
            state=state,
            agent=lim.check_optional_id("agent", request.agent, self.limits),
            thread_id=lim.check_optional_id("thread_id", request.thread_id, self.limits),
            before=before,
            limit=size + 1,
        )
        page, more = rows[:size], len(rows) > size
        return turns_pb2.ListTurnsResponse(
            turns=[turn_to_proto(t) for _, t in page],
            next_page_token=_encode_token(page[-1][0]) if more else "",
        )

    async def ListEvents(
        self, request: turns_pb2.ListEventsRequest, context: Origin
    ) -> turns_pb2.ListEventsResponse:
        return self.operations.list_events(request)

    async def Heartbeat(
        self, request: turns_pb2.HeartbeatRequest, context: Ctx
    ) -> turns_pb2.HeartbeatResponse:
        turn_id = self._id("turn_id", request.turn_id)
        attempt = self._attempt(request.attempt)
        replica = self._id("replica", request.replica)
        incarnation = self._id("incarnation", request.incarnation)
        self._own(turn_id)
        lease = await self.engine.turns.heartbeat(
            turn_id=turn_id, attempt=attempt, replica=replica, incarnation=incarnation
        )
        return turns_pb2.HeartbeatResponse(lease_expires_at=timestamp(lease))

    async def AppendEvents(
        self, request: turns_pb2.AppendEventsRequest, context: Ctx
    ) -> turns_pb2.AppendEventsResponse:
        turn_id = self._id("turn_id", request.turn_id)
        attempt = self._attempt(request.attempt)
        events = self._events(request.events)
        self._own(turn_id)
        last = await self.engine.turns.append(turn_id=turn_id, attempt=attempt, events=events)
        return turns_pb2.AppendEventsResponse(last_seq=last)

    async def ParkTurn(
        self, request: turns_pb2.ParkTurnRequest, context: Ctx
    ) -> turns_pb2.ParkTurnResponse:
        turn_id = self._id("turn_id", request.turn_id)
        attempt = self._attempt(request.attempt)
        interrupt_json = self._value("interrupt", request.interrupt, self.limits.max_input_bytes)
        events = self._events(request.events)
        self._own(turn_id)
        turn = await self.engine.turns.park(
            turn_id=turn_id, attempt=attempt, interrupt_json=interrupt_json, events=events
        )
        return turns_pb2.ParkTurnResponse(turn=turn_to_proto(turn))

    async def FinishTurn(
        self, request: turns_pb2.FinishTurnRequest, context: Ctx
    ) -> turns_pb2.FinishTurnResponse:
        turn_id = self._id("turn_id", request.turn_id)
        if request.outcome not in (turns_pb2.OUTCOME_DONE, turns_pb2.OUTCOME_FAILED):
            raise InvalidArgument("outcome must be OUTCOME_DONE or OUTCOME_FAILED")
        failed = request.outcome == turns_pb2.OUTCOME_FAILED
        if failed and not request.error:
            raise InvalidArgument("a FAILED outcome needs an error message")
        lim.check_size("error", len(request.error.encode()), self.limits.max_error_bytes)
        attempt = self._attempt(request.attempt)
        events = self._events(request.events)
        self._own(turn_id)
        turn = await self.engine.turns.finish(
            turn_id=turn_id, attempt=attempt, failed=failed, error=request.error, events=events
        )
        return turns_pb2.FinishTurnResponse(turn=turn_to_proto(turn))

    async def ResumeDetached(
        self, request: turns_pb2.ResumeDetachedRequest, context: Origin
    ) -> turns_pb2.ResumeDetachedResponse:
        turn_id = self._id("turn_id", request.turn_id)
        resume_json = self._value("resume", request.resume, self.limits.max_resume_bytes)
        self._acting_for(context, auth.JSONRPC_RESUME_DETACHED)
        async with audit_log.audited(self.audit, audit_log.RESUME, turn_id, context):
            self._own(turn_id)
            # Operators' and agents' by role; the owner's of the turn's thread.
            self.operations.require_answer(turn_id)
            turn, dispatched = await self.engine.turns.resume(
                turn_id=turn_id, resume_json=resume_json
            )
        return turns_pb2.ResumeDetachedResponse(turn=turn_to_proto(turn), dispatched=dispatched)

    async def Redrive(
        self, request: turns_pb2.RedriveRequest, context: Origin
    ) -> turns_pb2.RedriveResponse:
        if request.turn_id:
            if request.agent or request.replica or request.incarnation:
                raise InvalidArgument(
                    "give either turn_id (operator form) or agent, replica and incarnation "
                    "(startup form), not both"
                )
            turn_id = self._id("turn_id", request.turn_id)
            async with audit_log.audited(self.audit, audit_log.REDRIVE, turn_id, context):
                auth.require_right(auth.REDRIVE_OPERATOR)
                redriven, dispatched = await self.engine.turns.redrive_turn(
                    turn_id=turn_id, force=request.force
                )
            return turns_pb2.RedriveResponse(turns=[_redriven(redriven)], dispatched=dispatched)
        if not (request.agent and request.replica and request.incarnation):
            raise InvalidArgument(
                "Redrive needs turn_id (operator form) or agent, replica and incarnation "
                "(startup form)"
            )
        if request.force:
            raise InvalidArgument("force applies to the operator form (turn_id) only")
        agent = lim.check_agent(request.agent, self.limits)
        replica = self._id("replica", request.replica)
        incarnation = self._id("incarnation", request.incarnation)
        auth.require_right(auth.REDRIVE_STARTUP)
        auth.require_agent(agent)
        redriven_all = await self.engine.turns.redrive_replica(
            agent=agent, replica=replica, incarnation=incarnation, served=_served(request.graph)
        )
        return turns_pb2.RedriveResponse(turns=[_redriven(r) for r in redriven_all])

    async def ClaimTurn(
        self, request: turns_pb2.ClaimTurnRequest, context: Ctx
    ) -> turns_pb2.ClaimTurnResponse:
        turn_id = self._id("turn_id", request.turn_id)
        attempt = self._attempt(request.attempt)
        replica = self._id("replica", request.replica)
        incarnation = self._id("incarnation", request.incarnation)
        self._own(turn_id)
        turn, checkpoint_id, thread_empty = await self.engine.turns.claim(
            turn_id=turn_id,
            attempt=attempt,
            replica=replica,
            incarnation=incarnation,
            served=_served(request.graph),
        )
        return turns_pb2.ClaimTurnResponse(
            turn=turn_to_proto(turn), checkpoint_id=checkpoint_id, thread_empty=thread_empty
        )

    # -- effects (journal/effects.py) ---------------------------------------------------

    def _effect_call(self, call: turns_pb2.EffectCall) -> EffectCall:
        turn_id = self._id("call.turn_id", call.turn_id)
        # An id's characters exclude "~", which marks a superseded key's successors.
        key = lim.check_id("call.key", call.key, self.limits)
        if not call.name or len(call.name) > 200:
            raise InvalidArgument("call.name (the effect's name) must be 1 to 200 characters")
        policy = PROTO_TO_EFFECT_POLICY.get(call.policy)
        if policy is None:
            raise InvalidArgument("call.policy must be RETRY, PARK or FAIL")
        if call.call_index < 0:
            raise InvalidArgument("call.call_index must not be negative")
        args = _canonical_json("call.args_json", call.args_json or "{}", self.limits)
        return EffectCall(
            turn_id=turn_id,
            attempt=self._attempt(call.attempt),
            key=key,
            name=call.name,
            args_json=args,
            policy=policy,
            task_id=lim.check_length("call.task_id", call.task_id, self.limits.max_id_length),
            checkpoint_id=lim.check_length(
                "call.checkpoint_id", call.checkpoint_id, self.limits.max_id_length
            ),
            call_index=call.call_index,
        )

    async def BeginEffect(
        self, request: turns_pb2.BeginEffectRequest, context: Ctx
    ) -> turns_pb2.BeginEffectResponse:
        call = self._effect_call(request.call)
        self._own(call.turn_id)
        decision, effect = await self.engine.effects.begin(
            call, record_intent=request.record_intent
        )
        return turns_pb2.BeginEffectResponse(
            decision=_DECISIONS[decision], effect=effect_to_proto(effect)
        )

    async def RecordEffect(
        self, request: turns_pb2.RecordEffectRequest, context: Ctx
    ) -> turns_pb2.RecordEffectResponse:
        call = self._effect_call(request.call)
        key = lim.check_length("key", request.key or call.key, self.limits.max_id_length + 12)
        state = _RECORDED_STATES.get(request.state)
        if state is None:
            raise InvalidArgument("state must be DONE, FAILED or RESOLVED")
        if not request.outcome_json:
            raise InvalidArgument(
                "outcome_json is required: the result (DONE, RESOLVED) or the error (FAILED)"
            )
        outcome = _canonical_json("outcome_json", request.outcome_json, self.limits)
        self._own(call.turn_id)
        effect = await self.engine.effects.record(call, key, state, outcome)
        return turns_pb2.RecordEffectResponse(effect=effect_to_proto(effect))

    async def ListEffects(
        self, request: turns_pb2.ListEffectsRequest, context: Origin
    ) -> turns_pb2.ListEffectsResponse:
        turn = self.engine.turns.require(self._id("turn_id", request.turn_id))
        auth.require_turn(turn.turn_id, lambda: turn)
        size = lim.page_size(request.page_size, self.limits.max_page_size, self.limits)
        lim.check_length("page_token", request.page_token, 64)
        offset = _decode_token(request.page_token) if request.page_token else 0
        rows = await self.engine.effects.list(turn.turn_id, offset, size + 1)
        page, more = rows[:size], len(rows) > size
        return turns_pb2.ListEffectsResponse(
            effects=[effect_to_proto(e) for e in page],
            next_page_token=_encode_token(offset + size) if more else "",
        )

    async def ListAgents(
        self, request: turns_pb2.ListAgentsRequest, context: Origin
    ) -> turns_pb2.ListAgentsResponse:
        names = set(self.engine.directory.known_agents()) | set(
            self.engine.turns.announced_agents()
        )
        if request.agent:
            # Named: listed even with no replica and never announced (its turns may wait).
            names = {lim.check_agent(request.agent, self.limits)}
        out = turns_pb2.ListAgentsResponse()
        for agent in sorted(names):
            if not auth.sees_agent(agent):
                continue
            entry = out.agents.add(agent=agent, policy=self.engine.versions.policies.of(agent))
            for r in self.engine.directory.replicas(agent):
                entry.replicas.add(
                    replica=r.replica,
                    incarnation=r.incarnation,
                    graph=version_ref(r.fingerprint, r.label),
                    announced_at=timestamp(r.announced_at),
                )
            for w in self.engine.turns.waiting_turns(agent):
                entry.waiting.add(
                    turn_id=w.turn.turn_id,
                    thread_id=w.turn.thread_id,
                    state=STATE_TO_PROTO[w.turn.state],
                    waiting_for=version_ref(w.need.fingerprint, w.need.label),
                    detail=w.detail,
                )
        return out

    async def MigrateTurns(
        self, request: turns_pb2.MigrateTurnsRequest, context: Ctx
    ) -> turns_pb2.MigrateTurnsResponse:
        agent = lim.check_agent(request.agent, self.limits)
        if not _FINGERPRINT.match(request.to_fingerprint):
            raise InvalidArgument(
                "to_fingerprint must be a graph fingerprint (64 hex digits); "
                "`turnkeeper agents` lists the ones live replicas serve"
            )
        if request.from_fingerprint and not _FINGERPRINT.match(request.from_fingerprint):
            raise InvalidArgument("from_fingerprint must be empty or 64 hex digits")
        turn_ids = [self._id("turn_ids", t) for t in request.turn_ids]
        target = f"agent {agent} to {request.to_fingerprint[:12]}" + (
            f": {', '.join(turn_ids)}" if turn_ids else ""
        )
        if request.dry_run:
            moved = await self._migrate(request, agent, turn_ids)
        else:
            async with audit_log.audited(self.audit, audit_log.MIGRATE_TURNS, target, context):
                moved = await self._migrate(request, agent, turn_ids)
        return turns_pb2.MigrateTurnsResponse(turn_ids=moved)

    async def _migrate(
        self, request: turns_pb2.MigrateTurnsRequest, agent: str, turn_ids: list[str]
    ) -> list[str]:
        return await self.engine.turns.migrate(
            agent=agent,
            to_fingerprint=request.to_fingerprint,
            from_fingerprint=request.from_fingerprint,
            turn_ids=turn_ids,
            dry_run=request.dry_run,
        )

    async def WatchTurn(
        self, request: turns_pb2.WatchTurnRequest, context: Ctx
    ) -> AsyncIterator[turns_pb2.WatchTurnResponse]:
        with self.operations.watch_quota(context):
            async with contextlib.aclosing(self.operations.watch(request)) as frames:
                async for frame in frames:
                    yield frame


_DECISIONS = {
    effects.RUN: turns_pb2.EFFECT_DECISION_RUN,
    effects.RECORDED: turns_pb2.EFFECT_DECISION_RECORDED,
    effects.UNCERTAIN: turns_pb2.EFFECT_DECISION_UNCERTAIN,
}
_RECORDED_STATES = {
    turns_pb2.EFFECT_STATE_DONE: EFFECT_DONE,
    turns_pb2.EFFECT_STATE_FAILED: EFFECT_FAILED,
    turns_pb2.EFFECT_STATE_RESOLVED: EFFECT_RESOLVED,
}


def _canonical_json(name: str, text: str, limits: Limits) -> str:
    """`text` checked as JSON within the limits, re-written with sorted keys, so that
    two executions' arguments compare as text (divergence) whatever their order."""
    lim.check_json_text(name, text, limits.max_input_bytes, limits.max_json_depth)
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def _seconds(name: str, value: duration_pb2.Duration) -> float:
    seconds = value.ToNanoseconds() / 1e9
    if seconds < 0:
        raise InvalidArgument(f"{name} must not be negative (unset or 0: the service's default)")
    return seconds


def _served(graph: turns_pb2.GraphVersion) -> Served:
    """The version a replica says it serves; INVALID_ARGUMENT for a malformed one."""
    if graph.fingerprint and not _FINGERPRINT.match(graph.fingerprint):
        raise InvalidArgument("graph.fingerprint must be 64 lower-case hex digits (SHA-256)")
    if len(graph.label) > 128:
        raise InvalidArgument("graph.label: at most 128 characters")
    return Served.parse(graph.fingerprint, graph.label, graph.shape_json)


def _redriven(r: Redriven) -> turns_pb2.RedrivenTurn:
    return turns_pb2.RedrivenTurn(
        turn=turn_to_proto(r.turn),
        checkpoint_id=r.checkpoint_id,
        rewind_seq=r.rewind_seq,
        failed_at_cap=r.failed_at_cap,
    )


def _encode_token(rowid: int) -> str:
    return base64.urlsafe_b64encode(f"v1:{rowid}".encode()).decode()


def _decode_token(token: str) -> int:
    try:
        version, rowid = base64.urlsafe_b64decode(token.encode()).decode().split(":")
        if version != "v1":
            raise ValueError(version)
        return lim.page_position(int(rowid))
    except (ValueError, UnicodeDecodeError):
        raise InvalidArgument("page_token is not one this service issued") from None
