"""Reaching an agent over NATS JSON-RPC (docs/architecture.md §6): the
:class:`~turnkeeper.panel.session.AgentTransport` that sessions use in production.

Requests go to ``<prefix>.<ns>.agents.<name>.tasks`` in vystak's envelope
``{jsonrpc, id, method, params, metadata}``; the agent's bridge answers them. A run's
events are followed from the turnkeeper service (gRPC WatchTurn, through
:class:`~turnkeeper.panel.follower.TurnFollower`), not from NATS: the service keeps them,
so a follower that reconnects loses nothing.

How failures are told apart (this is what makes ``retry()`` safe):

- not connected to NATS, or NATS answers "no responders" (no agent subscribed):
  :class:`~turnkeeper.panel.session.NotDispatched`; the request reached nobody;
- no answer within ``timeout``: :class:`~turnkeeper.panel.session.NoAnswer`; it went out;
- a JSON-RPC error answer: :class:`~turnkeeper.panel.session.AgentRejected`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final

import nats.errors
from nats.aio.client import Client

from turnkeeper import _tracing as tracing
from turnkeeper._caller_assertion import HEADER as ASSERTION_HEADER
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import PermissionDenied, TurnkeeperError, Unauthenticated
from turnkeeper.panel.follower import FollowOptions, Frame, TurnFollower
from turnkeeper.panel.session import AgentRejected, Created, NoAnswer, NotDispatched, RunStatus
from turnkeeper.states import TurnState
from turnkeeper.v1 import operations_pb2

__all__ = ["CREATE", "RESUME_DETACHED", "TURN_STATUS", "NatsAgentTransport", "agent_subject"]

CREATE: Final = "responses/create"
TURN_STATUS: Final = "responses/turnStatus"
RESUME_DETACHED: Final = "responses/resumeDetached"

# A JSON-RPC error answered for the service (the bridges' code for refusals).
SERVICE_ERROR: Final = -32000

# Raised by nats-py when the connection cannot carry the request at all.
_UNSENT: Final = (
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionDrainingError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
    nats.errors.NoServersError,
)


def agent_subject(agent: str, *, prefix: str = "vystak", namespace: str = "default") -> str:
    return f"{prefix}.{namespace}.agents.{agent}.tasks"


class NatsAgentTransport:
    """Talks to agent ``agent`` over the NATS connection ``nc`` and follows runs on
    the turnkeeper service through ``client``. Neither is closed by the transport."""

    def __init__(
        self,
        nc: Client,
        agent: str,
        *,
        client: AsyncTurnkeeperClient,
        prefix: str = "vystak",
        namespace: str = "default",
        timeout: float = 10.0,
        follow_options: FollowOptions | None = None,
        metadata: Mapping[str, Any] | None = None,
        assert_caller: bool | None = None,
    ) -> None:
        self.nc = nc
        self.agent = agent
        self.client = client
        self.subject = agent_subject(agent, prefix=prefix, namespace=namespace)
        self.timeout = timeout
        self.follow_options = follow_options
        self.metadata = dict(metadata or {})
        # Whether each request carries a caller assertion (turnkeeper._caller_assertion)
        # the service issues for it: by default when the client has a token (the
        # service then has tokens, and bridges refuse requests without one). The
        # token itself never goes on NATS.
        self.assert_caller = (
            bool(client.options.bearer_token) if assert_caller is None else assert_caller
        )

    async def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """One JSON-RPC request; its ``result``."""
        if not self.nc.is_connected:
            raise NotDispatched(f"not connected to NATS; {method} was not sent")
        envelope = {
            "jsonrpc": "2.0",
            "id": uuid.uuid4().hex,
            "method": method,
            "params": dict(params),
            "metadata": self.metadata,
        }
        with tracing.client_span(method, **{"rpc.system": "jsonrpc"}) as traced:
            return await self._request(method, envelope, traced)

    async def _request(
        self, method: str, envelope: dict[str, Any], traced: dict[str, str] | None
    ) -> Any:
        # The trace context (when tracing is on) beside the caller assertion.
        headers = {**(await self._assertion(method, envelope["id"])), **(traced or {})} or None
        try:
            msg = await self.nc.request(
                self.subject,
                json.dumps(envelope).encode(),
                timeout=self.timeout,
                headers=headers,
            )
        except nats.errors.NoRespondersError:
            raise NotDispatched(
                f"no agent {self.agent!r} is listening on {self.subject}; {method} was not sent"
            ) from None
        except _UNSENT as exc:
            raise NotDispatched(f"NATS could not send {method}: {exc!r}") from exc
        except TimeoutError:  # nats.errors.TimeoutError is one
            raise NoAnswer(f"no answer to {method} within {self.timeout:g}s") from None
        try:
            reply = json.loads(msg.data)
        except ValueError as exc:
            raise AgentRejected(-32700, f"the agent's answer is not JSON: {exc}") from None
        if not isinstance(reply, dict):
            raise AgentRejected(-32600, "the agent's answer is not a JSON-RPC envelope")
        error = reply.get("error")
        if isinstance(error, dict):
            raise AgentRejected(
                int(error.get("code", -32603)), str(error.get("message", "")), error.get("data")
            )
        return reply.get("result")

    async def _assertion(self, method: str, request_id: str) -> dict[str, str]:
        """The header of a caller assertion for this request, from the service."""
        if not self.assert_caller:
            return {}
        try:
            issued = await self.client.issue_assertion(
                operations_pb2.IssueAssertionRequest(
                    agent=self.agent, method=method, request_id=request_id
                )
            )
        except (PermissionDenied, Unauthenticated) as exc:
            code = "PERMISSION_DENIED" if isinstance(exc, PermissionDenied) else "UNAUTHENTICATED"
            raise AgentRejected(
                SERVICE_ERROR, str(exc), {"code": code, "message": str(exc)}
            ) from exc
        except TurnkeeperError as exc:
            raise NotDispatched(
                f"the service gave no caller assertion for {method} ({exc}); it was not sent"
            ) from exc
        return {ASSERTION_HEADER: issued.assertion}

    async def create(
        self, *, input: Any, thread_id: str, turn_id: str, regenerate: bool = False
    ) -> Created:
        params: dict[str, Any] = {
            "input": input,
            "thread_id": thread_id,
            "turn_id": turn_id,
            "background": True,
        }
        if regenerate:
            params["regenerate"] = True
        result = _object(await self.call(CREATE, params), CREATE)
        found = result.get("turn_id")
        return Created(
            turn_id=str(found) if found else None,
            thread_id=str(result.get("thread_id") or thread_id),
            status=str(result.get("status", "")),
        )

    async def turn_status(self, turn_id: str) -> RunStatus:
        result = _object(await self.call(TURN_STATUS, {"turn_id": turn_id}), TURN_STATUS)
        return RunStatus(
            turn_id=turn_id,
            state=TurnState.from_answer(result),
            attempts=int(result.get("attempts", 0)),
            last_seq=int(result.get("last_seq", 0)),
            error=str(result.get("error", "")),
        )

    async def resume(self, turn_id: str, value: Any) -> None:
        await self.call(RESUME_DETACHED, {"turn_id": turn_id, "resume": value})

    async def follow(self, turn_id: str) -> AsyncIterator[Frame]:
        async with TurnFollower(self.client, turn_id, self.follow_options) as follower:
            async for frame in follower:
                yield frame


def _object(result: Any, method: str) -> dict[str, Any]:
    if not isinstance(result, dict):
        raise AgentRejected(-32603, f"{method}: the agent's result is not a JSON object")
    return result
