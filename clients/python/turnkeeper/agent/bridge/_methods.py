"""The JSON-RPC methods the bridge serves (documented in :mod:`turnkeeper.agent.bridge`).

Status questions are answered from the service, the source of truth, never from
what this replica happens to be running.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import uuid
from collections.abc import Mapping
from typing import Any, Final

from google.protobuf import duration_pb2
from google.protobuf.message import DecodeError

from turnkeeper import _multitask as multitask
from turnkeeper._values import py_to_value
from turnkeeper.agent.bridge import _graph_api as graph_api
from turnkeeper.agent.bridge import _jsonrpc as jsonrpc
from turnkeeper.agent.bridge._caller_auth import CallerCheck, assertion_of
from turnkeeper.agent.bridge._graph_api import GraphApi
from turnkeeper.agent.bridge._intent import (
    INTENT_KEY,
    REGENERATE_INPUT,
    RunIntent,
    has_pending_work,
    is_reserved,
    parse_run,
    regenerate_point,
    thread_config,
)
from turnkeeper.agent.bridge._jsonrpc import (
    METHOD_NOT_FOUND,
    Method,
    Reply,
    Request,
    RpcError,
    invalid_params,
)
from turnkeeper.agent.bridge._runtime import Assignment, Identity, TurnRuntime
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import TurnkeeperError
from turnkeeper.states import TurnState
from turnkeeper.v1 import turns_pb2

log = logging.getLogger(__name__)

CREATE: Final = "responses/create"
TURN_STATUS: Final = "responses/turnStatus"
RESUME_DETACHED: Final = "responses/resumeDetached"
RESPONSES_CANCEL: Final = "responses/cancel"
# How the service hands this replica a turn to execute (a resume, a re-drive).
EXECUTE: Final = "turnkeeper/execute"
# How the service tells every replica that a turn was ended (a notification).
CANCEL: Final = "turnkeeper/cancel"
# How the service asks, before it declares a lapsed lease's agent dead, whether the
# replica of that incarnation still runs the turns (only that replica answers).
ALIVE: Final = "turnkeeper/alive"

# responses/create's status for each turn state (OpenAI Responses' words).
_RESPONSE_STATUS: Final = {
    turns_pb2.TURN_STATE_RUNNING: "in_progress",
    turns_pb2.TURN_STATE_PARKED: "in_progress",
    turns_pb2.TURN_STATE_DONE: "completed",
    turns_pb2.TURN_STATE_FAILED: "failed",
    turns_pb2.TURN_STATE_CANCELLED: "cancelled",
    turns_pb2.TURN_STATE_QUEUED: "queued",
}


def _seconds(params: Mapping[str, Any], name: str) -> duration_pb2.Duration:
    """An optional deadline in seconds (a positive number); unset: the service's default."""
    value = params.get(name)
    duration = duration_pb2.Duration()
    if value is None:
        return duration
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise invalid_params(f"{name} must be a positive number of seconds")
    duration.FromNanoseconds(int(value * 1e9))
    return duration


def status_words(state: int) -> dict[str, str]:
    """A turn state on the contract's methods: ``status``, the word a panel written to
    the contract reads right (a QUEUED turn is `running`), and ``state``, the exact
    one (decision 192). gRPC keeps its upper-case enum names."""
    turn_state = TurnState.from_proto(state)
    return {"status": turn_state.contract_word, "state": turn_state.word}


class Methods:
    def __init__(
        self,
        client: AsyncTurnkeeperClient,
        runtime: TurnRuntime,
        identity: Identity,
        callers: CallerCheck | None = None,
        graph_api: GraphApi | None = None,
    ) -> None:
        self.client = client
        # The langgraph/* methods (the service's LangGraph API reads the graph here).
        self.graph_api = graph_api
        self.runtime = runtime
        self.identity = identity
        # Who may call the responses/* methods; None: anyone (tests of the methods).
        self.callers = callers
        self.accepting = True

    async def dispatch(self, request: Request) -> Reply:
        handlers: dict[str, Method] = {
            CREATE: self.create,
            TURN_STATUS: self.turn_status,
            RESUME_DETACHED: self.resume_detached,
            RESPONSES_CANCEL: self.responses_cancel,
            EXECUTE: self.execute,
            CANCEL: self.cancelled,
            ALIVE: self.alive,
        }
        if self.graph_api is not None:
            handlers |= {
                graph_api.DESCRIBE: self.graph_api.describe,
                graph_api.STATE: self.graph_api.state,
                graph_api.HISTORY: self.graph_api.history,
                graph_api.UPDATE_STATE: self.graph_api.update_state,
            }
        handler = handlers.get(request.method)
        if handler is None:
            raise RpcError(
                METHOD_NOT_FOUND,
                f"method {request.method!r} not found; this bridge serves {', '.join(handlers)}",
            )
        try:
            # The service's own hand-offs (execute), cancel notifications and liveness
            # questions are not a caller's request: who may publish them is NATS's authorization (the
            # locked bundled server).
            if self.callers is not None and request.method not in (EXECUTE, CANCEL, ALIVE):
                assertion = self.callers.check(request)
                request = dataclasses.replace(
                    request, caller=assertion.who, assertion=assertion_of(request.headers)
                )
            return await handler(request)
        except TurnkeeperError as exc:
            raise RpcError.from_service(exc) from exc

    async def create(self, request: Request) -> Reply:
        params = request.params
        if params.get("background") is not True:
            raise invalid_params(
                f"{CREATE} needs background: true (this bridge runs detached turns; "
                "follow one with TurnStatus and WatchTurn)"
            )
        if "input" not in params:
            raise invalid_params("input is required")
        try:
            strategy = multitask.parse(params.get("multitask_strategy"))
        except ValueError as exc:
            raise invalid_params(str(exc)) from None
        deadlines = {name: _seconds(params, name) for name in ("max_run_time", "park_expiry")}
        regenerate = params.get("regenerate", False)
        if not isinstance(regenerate, bool):
            raise invalid_params("regenerate must be true or false")
        payload = params["input"]
        if regenerate and payload is not None:
            raise invalid_params(
                "regenerate answers the thread's latest input again: input must be null"
            )
        if is_reserved(payload):
            raise invalid_params(f"input: the top-level key {INTENT_KEY!r} is reserved")
        given_turn_id = jsonrpc.optional_str(params, "turn_id")
        turn_id = given_turn_id or uuid.uuid4().hex
        given_thread_id = jsonrpc.optional_str(params, "thread_id")
        if payload is None and given_thread_id is None:
            raise invalid_params("input null continues a thread: thread_id is required")
        thread_id = given_thread_id or uuid.uuid4().hex
        intent: RunIntent | None = None
        if params.get("run") is not None:
            if regenerate:
                raise invalid_params("regenerate takes no run options")
            try:
                intent = parse_run(params["run"], payload)
            except ValueError as exc:
                raise invalid_params(str(exc)) from None
        journaled: Any = REGENERATE_INPUT if regenerate else payload
        if intent is not None:
            journaled = intent.journaled()
        try:
            value = py_to_value(journaled)
        except Exception as exc:
            raise invalid_params(f"input is not JSON data: {exc}") from None
        if not self.accepting:
            message = "this replica is shutting down; send the request again"
            raise RpcError(
                jsonrpc.SERVICE_ERROR, message, {"code": "UNAVAILABLE", "message": message}
            )
        if regenerate:
            if await regenerate_point(self.runtime.graph, thread_config(thread_id)) is None:
                message = f"thread {thread_id} has no run to regenerate"
                raise RpcError(
                    jsonrpc.SERVICE_ERROR,
                    message,
                    {"code": "FAILED_PRECONDITION", "message": message},
                )
        elif (
            payload is None
            and (intent is None or not (intent.options.command or intent.options.checkpoint_id))
            and await self._nothing_to_continue(thread_id, given_turn_id)
        ):
            return Reply({"turn_id": None, "thread_id": thread_id, "status": "completed"})
        # A free slot: the turn is this replica's from the start. None: it is
        # journaled unowned and claimed here when a slot frees (_admission.py).
        admission = self.runtime.admission
        slot = admission.try_take()
        start = turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=thread_id,
            agent=self.identity.agent,
            input=value,
            replica=self.identity.replica if slot else "",
            incarnation=self.identity.incarnation if slot else "",
            multitask_strategy=multitask.to_wire(strategy),
            max_run_time=deadlines["max_run_time"],
            park_expiry=deadlines["park_expiry"],
            graph=self.runtime.graph_version,
        )
        # Journaled before the answer: a turn the caller was told about exists. For a
        # caller, with its assertion: an interrupt, a rollback or a regenerate needs
        # the caller's right to cancel, which the service checks.
        try:
            if request.caller is None:
                response = await self.client.start_turn(start)
            else:
                response = await self.client.start_turn_on_behalf(
                    start, request.caller, assertion=request.assertion
                )
        except BaseException:
            if slot:
                admission.give_back()
            raise
        turn = response.turn
        result = {
            "turn_id": turn.turn_id,
            "thread_id": turn.thread_id,
            "status": _RESPONSE_STATUS.get(turn.state, "in_progress"),
        }
        if response.cancelled_turn_id:
            result["cancelled_turn_id"] = response.cancelled_turn_id
        if not response.created or turn.state != turns_pb2.TURN_STATE_RUNNING:
            # The same request again: the turn is already on its way (or over); or
            # queued: the service hands it to a replica when its turn comes.
            if slot:
                admission.give_back()
            return Reply(result)
        if not slot:
            # Every slot is taken: it waits, unowned, for the next one (or for
            # another replica the service offers it to).
            admission.wait_to_claim(turn.turn_id, turn.attempts, "create")
            return Reply({**result, "status": "queued"})

        async def run() -> None:
            self.runtime.start(Assignment(turn, "", "create"), slot=True)

        return Reply(result, then=run)

    async def _nothing_to_continue(self, thread_id: str, turn_id: str | None) -> bool:
        """No pending work on the thread, and ``turn_id`` is no turn that already
        ran (the same request sent again: StartTurn then answers for that turn)."""
        if await has_pending_work(self.runtime.graph, thread_id):
            return False
        if turn_id is None:
            return True
        status = await self.client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
        return status.state in (turns_pb2.TURN_STATE_UNKNOWN, turns_pb2.TURN_STATE_UNSPECIFIED)

    async def turn_status(self, request: Request) -> Reply:
        turn_id = jsonrpc.required_str(request.params, "turn_id")
        status = await self.client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
        answer = {
            "turn_id": turn_id,
            **status_words(status.state),
            "attempts": status.attempts,
            "last_seq": status.last_seq,
            "error": status.error,
        }
        if status.end_reason:
            # Why the service ended it: cancelled, max_run_time, park_expired ...
            answer["end_reason"] = status.end_reason
        return Reply(answer)

    async def resume_detached(self, request: Request) -> Reply:
        turn_id = jsonrpc.required_str(request.params, "turn_id")
        if "resume" not in request.params:
            raise invalid_params("resume is required (the value interrupt() returns; may be null)")
        try:
            value = py_to_value(request.params["resume"])
        except Exception as exc:
            raise invalid_params(f"resume is not JSON data: {exc}") from None
        resume = turns_pb2.ResumeDetachedRequest(turn_id=turn_id, resume=value)
        if request.caller is None:
            response = await self.client.resume_detached(resume)
        else:
            # The audit log names whom this bridge acted for.
            response = await self.client.resume_detached_on_behalf(
                resume, request.caller, assertion=request.assertion
            )
        return Reply(
            {
                "turn_id": turn_id,
                **status_words(response.turn.state),
                "dispatched": response.dispatched,
            }
        )

    async def responses_cancel(self, request: Request) -> Reply:
        turn_id = jsonrpc.required_str(request.params, "turn_id")
        rollback = request.params.get("rollback", False)
        if not isinstance(rollback, bool):
            raise invalid_params("rollback must be true or false")
        reason = jsonrpc.optional_str(request.params, "reason") or ""
        cancel = turns_pb2.CancelTurnRequest(turn_id=turn_id, rollback=rollback, reason=reason)
        if request.caller is None:
            response = await self.client.cancel_turn(cancel)
        else:
            # The audit log names whom this bridge acted for.
            response = await self.client.cancel_turn_on_behalf(
                cancel, request.caller, assertion=request.assertion
            )
        return Reply(
            {
                "turn_id": turn_id,
                "status": _RESPONSE_STATUS[response.turn.state],
                "last_seq": response.turn.last_seq,
                "checkpoints_removed": response.checkpoints_removed,
            }
        )

    async def cancelled(self, request: Request) -> Reply:
        """The service ended a turn (a notification to every replica): stop it here
        if it runs here, once the service confirms it. A notice is only a hint:
        whoever can publish on the control subject could forge one, so the turn's
        state is asked of the service (the source of truth) first. Fencing would
        stop the execution at its next write anyway."""
        params = request.params
        turn_id = jsonrpc.required_str(params, "turn_id")
        attempt = jsonrpc.required_int(params, "attempt")
        reason = params.get("reason")
        if self.runtime.running(turn_id) is None:
            return Reply({"stopped": False})
        status = await self.client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
        if status.state == turns_pb2.TURN_STATE_RUNNING and status.attempts == attempt:
            log.warning(
                "turn_id=%s attempt=%d: a stop notice for a turn the service says still "
                "runs this attempt: ignored (forged or stale)",
                turn_id,
                attempt,
            )
            return Reply({"stopped": False})
        stopped = self.runtime.cancel(turn_id, attempt, reason if isinstance(reason, str) else "")
        return Reply({"stopped": stopped})

    def _take(self, params: Mapping[str, Any], turn_id: str, attempt: int, reason: str) -> bool:
        """A hand-off that carries its claim (decision 590): the service made this
        incarnation the turn's owner in the commit that started it, and says what
        ClaimTurn would answer. Started here before the answer, so that the
        service's liveness question after it finds the execution. Not for this
        incarnation (a replica restarted under the same name), or not readable: not
        taken, and the service offers the turn again with nothing spent."""
        if params.get("incarnation") != self.identity.incarnation:
            log.info("turn_id=%s attempt=%d: a hand-off for another incarnation", turn_id, attempt)
            return False
        claim, lease = params.get("claim"), params.get("lease_seconds")
        try:
            response = turns_pb2.ClaimTurnResponse.FromString(base64.b64decode(str(claim)))
        except (ValueError, DecodeError):
            log.warning("turn_id=%s: a hand-off whose claim is unreadable", turn_id)
            return False
        if response.turn.turn_id != turn_id or response.turn.attempts != attempt:
            log.warning("turn_id=%s: a hand-off whose claim is another turn's", turn_id)
            return False
        assignment = Assignment(
            response.turn,
            response.checkpoint_id,
            reason,
            thread_empty=response.thread_empty,
            handed_lease=float(lease) if isinstance(lease, int | float) and lease > 0 else 15.0,
        )
        return self.runtime.take(assignment)

    async def alive(self, request: Request) -> Reply:
        """Which of ``turns`` ({turn_id: attempt}) this replica still executes (or
        holds, waiting for a slot), asked by the service when their leases lapsed:
        a heartbeat that came late on a busy machine is no dead agent. Only the
        incarnation asked about answers; the other replicas stay silent."""
        params = request.params
        if params.get("incarnation") != self.identity.incarnation:
            return Reply(None, silent=True)
        turns = params.get("turns")
        if not isinstance(turns, dict):
            raise invalid_params("turns must be an object of turn_id: attempt")
        running = sorted(
            turn_id
            for turn_id, attempt in turns.items()
            if isinstance(attempt, int)
            and (execution := self.runtime.running(turn_id)) is not None
            and execution.attempt == attempt
            and execution.lost is None
        )
        return Reply({"running": running})

    async def execute(self, request: Request) -> Reply:
        params = request.params
        turn_id = jsonrpc.required_str(params, "turn_id")
        attempt = jsonrpc.required_int(params, "attempt")
        reason = params.get("reason")
        reason = reason if isinstance(reason, str) and reason else "handed out"
        if not self.accepting:
            return Reply({"accepted": False})
        if "claim" in params:
            return Reply({"accepted": self._take(params, turn_id, attempt, reason)})

        async def claim() -> None:
            await self.runtime.claim(turn_id, attempt, reason)

        # Acknowledged on receipt; the claim and the run come after the answer.
        return Reply({"accepted": True}, then=claim)
