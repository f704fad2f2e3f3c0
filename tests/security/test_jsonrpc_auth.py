"""JSON-RPC callers of a bridge authenticate when the service has tokens.

A real agent process (tests/agents/job_agent.py, the approval graph) with its agent
token, a real nats-server, a service with tokens. Each responses/* request carries
the caller's token in the NATS header ``Authorization``; the bridge asks the service
who it is (OperationsService/Introspect) and applies the role matrix: anonymous and
unknown tokens are UNAUTHENTICATED, a panel may start turns and read their status
but may not answer a parked turn, another agent's token may not call this agent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.session import AgentRejected
from turnkeeper.v1 import operations_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import AGENT, Agents, agents_for
from tests.support.nats import NatsServer
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

ROLES = {
    "agent": f"agent:{AGENT}",
    "stranger": "agent:stranger",
    "panel": "panel",
    "operator": "operator",
    "admin": "admin",
}


@pytest.fixture
async def tokens(tmp_path: Path) -> dict[str, str]:
    return write_tokens(tmp_path / "tokens.jsonl", ROLES)


@pytest.fixture
async def secured(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path, tokens: dict[str, str]
) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, tokens_file=tmp_path / "tokens.jsonl")


@pytest.fixture
async def admin(
    secured: TurnkeeperServer, tokens: dict[str, str]
) -> AsyncIterator[AsyncTurnkeeperClient]:
    options = ConnectionOptions(target=secured.address, bearer_token=tokens["admin"])
    async with AsyncTurnkeeperClient(options) as client:
        yield client


@pytest.fixture
async def agents(
    secured: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agents]:
    async with agents_for(secured.address, nats_server.url, tmp_path / "side.log") as spawned:
        yield spawned


async def call(nc: Client, method: str, params: dict[str, Any], token: str | None) -> Any:
    """One JSON-RPC request with the token (if any) in the Authorization header."""
    envelope = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    headers = {"Authorization": f"Bearer {token}"} if token is not None else None
    msg = await nc.request(
        f"vystak.default.agents.{AGENT}.tasks",
        json.dumps(envelope).encode(),
        timeout=20,
        headers=headers,
    )
    return json.loads(msg.data)


def refused(reply: dict[str, Any], code: str) -> str:
    assert "error" in reply, reply
    assert reply["error"]["code"] == -32000, reply
    assert reply["error"]["data"]["code"] == code, reply
    message: str = reply["error"]["message"]
    return message


async def park(nc: Client, admin: AsyncTurnkeeperClient, token: str) -> str:
    """Start a turn on the approval graph with `token`; return once it is PARKED."""
    turn_id = uuid.uuid4().hex
    reply = await call(
        nc,
        "responses/create",
        {"input": {"job": turn_id, "results": []}, "turn_id": turn_id, "background": True},
        token,
    )
    assert reply.get("result", {}).get("status") == "in_progress", reply
    async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
        if frame.event.type == "interrupt":
            break
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_PARKED
    return turn_id


async def state(admin: AsyncTurnkeeperClient, turn_id: str) -> int:
    return (await admin.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))).state


async def test_callers_get_what_the_role_matrix_says_and_nothing_more(
    agents: Agents, nc: Client, admin: AsyncTurnkeeperClient, tokens: dict[str, str]
) -> None:
    await agents.start(graph="approval", extra_env={"TURNKEEPER_TOKEN": tokens["agent"]})

    # Anonymous: nothing at all, and the reason says what to send.
    message = refused(
        await call(nc, "responses/create", {"input": 1, "background": True}, None),
        "UNAUTHENTICATED",
    )
    assert "bearer token" in message and "Authorization" in message, message

    # A panel may start a turn and read its status ...
    turn_id = await park(nc, admin, tokens["panel"])
    status = await call(nc, "responses/turnStatus", {"turn_id": turn_id}, tokens["panel"])
    assert status["result"]["status"] == "parked", status

    # ... but nobody without the right answers the parked turn.
    resume = {"turn_id": turn_id, "resume": "yes"}
    message = refused(await call(nc, "responses/resumeDetached", resume, None), "UNAUTHENTICATED")
    assert "needs a bearer token" in message
    refused(await call(nc, "responses/resumeDetached", resume, "tk-made-up"), "UNAUTHENTICATED")
    message = refused(
        await call(nc, "responses/resumeDetached", resume, tokens["panel"]), "PERMISSION_DENIED"
    )
    assert "token panel (panel) may not call responses/resumeDetached" in message, message
    message = refused(
        await call(nc, "responses/turnStatus", {"turn_id": turn_id}, tokens["stranger"]),
        "PERMISSION_DENIED",
    )
    assert "acts for agent 'stranger'" in message, message
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_PARKED

    # An operator may: the turn goes on to its end.
    done = await call(nc, "responses/resumeDetached", resume, tokens["operator"])
    assert done["result"]["dispatched"] is True, done
    async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
        if frame.event.type.startswith("turn."):
            assert frame.event.type == "turn.done"
            break
    # The audit log names the operator the bridge acted for; the refusals above
    # never reached the service.
    audit = await admin.list_audit(operations_pb2.ListAuditRequest())
    resumes = [(r.actor, r.target, r.outcome) for r in audit.records if r.action == "resume"]
    assert resumes == [("operator (operator) via agent (agent:jobs)", turn_id, "ok")]


async def test_responses_cancel_goes_through_caller_auth_and_the_audit_log(
    agents: Agents, nc: Client, admin: AsyncTurnkeeperClient, tokens: dict[str, str]
) -> None:
    await agents.start(graph="approval", extra_env={"TURNKEEPER_TOKEN": tokens["agent"]})
    turn_id = await park(nc, admin, tokens["panel"])
    cancel = {"turn_id": turn_id, "reason": "stop"}

    message = refused(await call(nc, "responses/cancel", cancel, None), "UNAUTHENTICATED")
    assert "needs a bearer token" in message
    message = refused(
        await call(nc, "responses/cancel", cancel, tokens["panel"]), "PERMISSION_DENIED"
    )
    assert "token panel (panel) may not call responses/cancel" in message, message
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_PARKED

    done = await call(nc, "responses/cancel", cancel, tokens["operator"])
    assert done["result"]["status"] == "cancelled", done
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_CANCELLED
    audit = await admin.list_audit(operations_pb2.ListAuditRequest())
    cancels = [(r.actor, r.target, r.outcome) for r in audit.records if r.action == "cancel"]
    assert cancels == [("operator (operator) via agent (agent:jobs)", turn_id, "ok")]


async def test_the_session_transport_sends_its_clients_token(
    agents: Agents, nc: Client, admin: AsyncTurnkeeperClient, tokens: dict[str, str]
) -> None:
    await agents.start(graph="approval", extra_env={"TURNKEEPER_TOKEN": tokens["agent"]})
    async with AsyncTurnkeeperClient(
        ConnectionOptions(target=admin.options.target, bearer_token=tokens["panel"])
    ) as panel_client:
        transport = NatsAgentTransport(nc, AGENT, client=panel_client)
        turn_id = uuid.uuid4().hex
        created = await transport.create(
            input={"job": turn_id, "results": []}, thread_id=turn_id, turn_id=turn_id
        )
        assert created.turn_id == turn_id
        status = await transport.turn_status(turn_id)
        assert status.turn_id == turn_id
        with pytest.raises(AgentRejected) as info:
            await transport.resume(turn_id, "yes")
        assert info.value.data["code"] == "PERMISSION_DENIED"
        anonymous = NatsAgentTransport(nc, AGENT, client=panel_client, token="")
        with pytest.raises(AgentRejected) as info:
            await anonymous.turn_status(turn_id)
        assert info.value.data["code"] == "UNAUTHENTICATED"


async def test_introspect_answers_who_a_token_is(
    admin: AsyncTurnkeeperClient, tokens: dict[str, str]
) -> None:
    panel = await admin.introspect(operations_pb2.IntrospectRequest(token=tokens["panel"]))
    assert (panel.authentication, panel.active, panel.name, panel.role) == (
        True,
        True,
        "panel",
        "panel",
    )
    assert list(panel.methods) == ["responses/create", "responses/turnStatus"]
    agent = await admin.introspect(operations_pb2.IntrospectRequest(token=tokens["agent"]))
    assert (agent.role, agent.agent) == ("agent", AGENT)
    assert "responses/resumeDetached" in agent.methods
    assert "responses/cancel" in agent.methods
    unknown = await admin.introspect(operations_pb2.IntrospectRequest(token="tk-nobody"))
    assert unknown.authentication and not unknown.active and not unknown.methods
