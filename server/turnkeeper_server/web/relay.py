"""The chat panel's JSON-RPC calls to agents, relayed over the service's NATS link.

    POST /v1/agents/{agent}/rpc   {"method": "responses/create", "params": {...}}
      -> 200 the agent's JSON-RPC reply envelope ({jsonrpc, id, result} or {.., error})
      -> 503 {code: "unavailable", message, dispatched: false}: no replica took it
      -> 504 {code: "deadline_exceeded", message, dispatched: true}: it went out, no answer

A browser cannot speak NATS, and the service already holds a NATS connection, so it
forwards the panel's requests to `<prefix>.<ns>.agents.<agent>.tasks` unchanged in
meaning. `dispatched` tells a page whether a retry is safe: only a request that
reached nobody may be sent again (the client retry rule).

Rights are those of the gRPC call each method stands for (security/auth.py's one
table): responses/create needs a role that talks to agents (panel, operator, admin,
or the agent's own token); responses/turnStatus is a read; responses/resumeDetached
goes on to ResumeDetached, which answers a panel only on a thread it owns (decision
309); responses/cancel needs the CancelTurn right, so a panel token cannot cancel
through an agent what it cannot cancel itself.
An agent token reaches its own agent only. The service's internal hand-off method is
never relayed.

The caller's token stays here: the request carries instead a caller assertion the
service signs for that agent, that method and that request id
(turnkeeper._caller_assertion), which the bridge verifies with its own token.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web
from nats.errors import Error as NatsError
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from turnkeeper import _tracing as tracing
from turnkeeper._caller_assertion import HEADER as ASSERTION_HEADER

from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.messaging.link import NatsLink, agent_subject
from turnkeeper_server.security import auth
from turnkeeper_server.security.assertions import Assertions
from turnkeeper_server.security.auth import TokenStore
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.connect import MAX_BODY_BYTES, error_response, read_body

log = logging.getLogger(__name__)

CREATE: Final = "responses/create"
TURN_STATUS: Final = "responses/turnStatus"
RESUME_DETACHED: Final = "responses/resumeDetached"
CANCEL: Final = auth.JSONRPC_CANCEL

# The methods relayed: a caller's requests to a bridge (never the service's own).
RELAYED: Final = frozenset(auth.JSONRPC_METHODS)


def check_call(
    caller: auth.Caller | None, agent: str, method: str, *, granted: bool = False
) -> None:
    if method not in RELAYED:
        raise InvalidArgument(
            f"method {method!r} is not relayed; the relay carries {', '.join(sorted(RELAYED))}"
        )
    if caller is not None:
        # A granted call's right was checked by the service for that one request.
        auth.require_jsonrpc(caller, agent, auth.JSONRPC_TURN_STATUS if granted else method)


class AgentRelay:
    """The handler of POST /v1/agents/{agent}/rpc."""

    def __init__(
        self,
        link: NatsLink,
        tokens: TokenStore | None,
        assertions: Assertions | None,
        *,
        prefix: str,
        namespace: str,
        announced: Callable[[str], bool] = lambda agent: True,
        timeout: float = 10.0,
    ) -> None:
        self.link = link
        # Whether a replica of an agent ever announced itself (Turns.announced): a
        # request nobody heard for an agent never announced is likely a typo.
        self.announced = announced
        self.tokens = tokens
        # Issues the caller assertion of each relayed request (None without tokens).
        self.assertions = assertions
        self.prefix = prefix
        self.namespace = namespace
        self.timeout = timeout

    async def __call__(self, request: web.Request) -> web.Response:
        try:
            caller = web_auth.caller_of(request, self.tokens)
            agent = lim.check_agent(request.match_info["agent"])
            if request.content_type != "application/json":
                raise InvalidArgument("send the request as Content-Type application/json")
            raw = await read_body(request)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InvalidArgument(f"the body is not UTF-8: {exc}") from None
            # Strict JSON, no deeper than the service's JSON depth limit: a deep
            # body used to blow the parser's recursion guard into a 500.
            body = lim.check_json_text("the body", text, MAX_BODY_BYTES)
            if not isinstance(body, dict) or not isinstance(body.get("method"), str):
                raise InvalidArgument('the body must be {"method": "...", "params": {...}}')
            params = body.get("params", {})
            if not isinstance(params, dict):
                raise InvalidArgument("params must be a JSON object")
            check_call(caller, agent, body["method"])
            request_id = uuid.uuid4().hex
            headers = self._headers(caller, agent, body["method"], request_id)
        except Exception as exc:
            return error_response(exc)
        return await self._forward(agent, body["method"], params, headers, request_id)

    async def call(
        self,
        caller: auth.Caller | None,
        agent: str,
        method: str,
        params: dict[str, Any],
        *,
        granted: bool = False,
    ) -> Any:
        """One request to `agent` made for `caller` (rights checked, assertion
        signed): the bridge's result. Raises NotAnswered when no replica answered,
        AgentRefused with the bridge's JSON-RPC error. `granted`: the service
        checked this request's right itself (a thread owner's edit, decision 309);
        the relay's route never sets it."""
        check_call(caller, agent, method, granted=granted)
        request_id = uuid.uuid4().hex
        headers = self._headers(caller, agent, method, request_id, granted=granted)
        reply = await self._send(agent, method, params, headers, request_id)
        if isinstance(reply, NotAnswered):
            raise reply
        if not isinstance(reply, dict) or "error" in reply:
            error = reply.get("error") if isinstance(reply, dict) else None
            raise AgentRefused(agent, method, error if isinstance(error, dict) else {})
        return reply.get("result")

    def _headers(
        self,
        caller: auth.Caller | None,
        agent: str,
        method: str,
        request_id: str,
        *,
        granted: bool = False,
    ) -> dict[str, str]:
        headers: dict[str, str] = {}
        if caller is not None and self.assertions is not None:
            # Who the caller is, signed for this request: its token stays here.
            value, _ = self.assertions.issue(caller, agent, method, request_id, granted=granted)
            headers[ASSERTION_HEADER] = value
        return headers

    async def _forward(
        self,
        agent: str,
        method: str,
        params: dict[str, Any],
        headers: dict[str, str],
        request_id: str,
    ) -> web.Response:
        reply = await self._send(agent, method, params, headers, request_id)
        if isinstance(reply, NotAnswered):
            return web.json_response(
                {"code": reply.code, "message": reply.message, "dispatched": reply.dispatched},
                status=reply.status,
            )
        return web.json_response(reply)

    async def _send(
        self,
        agent: str,
        method: str,
        params: dict[str, Any],
        headers: dict[str, str],
        request_id: str,
    ) -> Any:
        """The bridge's reply envelope, or NotAnswered."""
        nc = self.link.client
        if nc is None or not nc.is_connected:
            return NotAnswered(503, "unavailable", "the service is not connected to NATS", False)
        envelope = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": method,
            "params": params,
            "metadata": {"via": "turnkeeper-http"},
        }
        subject = agent_subject(self.prefix, self.namespace, agent)
        try:
            tracing.inject(headers)
            msg = await nc.request(
                subject,
                json.dumps(envelope).encode(),
                timeout=self.timeout,
                headers=headers or None,
            )
        except NoRespondersError:
            message = f"no replica of agent {agent!r} is listening"
            if not self.announced(agent):
                message += (
                    ", and none has ever announced itself to this service: is the agent's "
                    "name right?"
                )
            return NotAnswered(503, "unavailable", message, False)
        except (TimeoutError, NatsTimeout):
            return NotAnswered(
                504,
                "deadline_exceeded",
                f"agent {agent!r} did not answer {method} in {self.timeout:g} s; "
                "it may have acted on it: check the turn's status",
                True,
            )
        except NatsError as exc:
            # Closed or reconnecting: nothing went out.
            return NotAnswered(503, "unavailable", f"NATS refused the request: {exc}", False)
        try:
            return json.loads(msg.data)
        except (ValueError, RecursionError):
            return NotAnswered(502, "internal", f"agent {agent!r} answered no JSON", True)


class NotAnswered(Exception):
    """No replica answered: `dispatched` says whether the request went out at all."""

    def __init__(self, status: int, code: str, message: str, dispatched: bool) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.dispatched = dispatched


class AgentRefused(Exception):
    """The bridge answered with a JSON-RPC error (`error`: {code, message, data})."""

    def __init__(self, agent: str, method: str, error: dict[str, Any]) -> None:
        super().__init__(f"agent {agent!r} refused {method}: {error.get('message', error)}")
        self.error = error

    @property
    def service_code(self) -> str | None:
        """The gRPC status name when the service refused the bridge's call."""
        data = self.error.get("data")
        return data.get("code") if isinstance(data, dict) else None

    @property
    def message(self) -> str:
        data = self.error.get("data")
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return str(data["message"])
        return str(self.error.get("message", "refused"))
