"""JSON-RPC callers of a bridge authenticate when the service has tokens.

A real agent process (tests/agents/job_agent.py, the approval graph) with its agent
token, a real nats-server, a service with tokens. A caller's token never goes on
NATS: each responses/* request carries a caller assertion the service issued for
it (OperationsService/IssueAssertion, or the HTTP relay), which the bridge verifies
with its own token and applies: no assertion, a forged or a replayed one is
UNAUTHENTICATED, a panel may start turns and read their status but may not answer
a parked turn, another agent's token gets no assertion for this agent.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper._caller_assertion import HEADER
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import PermissionDenied, Unauthenticated
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.panel.session import AgentRejected
from turnkeeper.v1 import operations_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import AGENT, Agents, agents_for
from tests.support.agents import assertion_for as issue
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
    SERVICE["address"] = secured.address
    options = ConnectionOptions(target=secured.address, bearer_token=tokens["admin"])
    async with AsyncTurnkeeperClient(options) as client:
        yield client


@pytest.fixture
async def agents(
    secured: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Agents]:
    async with agents_for(secured.address, nats_server.url, tmp_path / "side.log") as spawned:
        yield spawned


SERVICE: dict[str, str] = {}


async def assertion_for(token: str, method: str, request_id: str) -> str:
    options = ConnectionOptions(target=SERVICE["address"], bearer_token=token)
    return await issue(options, method, request_id)


async def send(
    nc: Client, envelope: dict[str, Any], headers: dict[str, str] | None, agent: str = AGENT
) -> Any:
    msg = await nc.request(
        f"vystak.default.agents.{agent}.tasks",
        json.dumps(envelope).encode(),
        timeout=20,
        headers=headers,
    )
    return json.loads(msg.data)


async def call(nc: Client, method: str, params: dict[str, Any], token: str | None) -> Any:
    """One JSON-RPC request, with an assertion the service issued for `token`'s
    caller (none for None)."""
    envelope: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": method,
        "params": params,
    }
    headers = None
    if token is not None:
        headers = {HEADER: await assertion_for(token, method, envelope["id"])}
    return await send(nc, envelope, headers)


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
    assert "caller assertion" in message and HEADER in message, message
    # A bearer token on NATS is no way in: it is never sent to an agent.
    envelope = {"jsonrpc": "2.0", "id": "x1", "method": "responses/create", "params": {}}
    message = refused(
        await send(nc, envelope, {"Authorization": f"Bearer {tokens['admin']}"}),
        "UNAUTHENTICATED",
    )
    assert "a bearer token is never sent to an agent" in message, message

    # A panel may start a turn and read its status ...
    own = await park(nc, admin, tokens["panel"])
    turn_id = await park(nc, admin, tokens["operator"])
    status = await call(nc, "responses/turnStatus", {"turn_id": turn_id}, tokens["panel"])
    assert status["result"]["status"] == "parked", status

    # ... but nobody without the right answers the parked turn: not without an
    # assertion, and not a panel on a thread it does not own (the operator made it;
    # the service refuses it at ResumeDetached, decision 309).
    resume = {"turn_id": turn_id, "resume": "yes"}
    message = refused(await call(nc, "responses/resumeDetached", resume, None), "UNAUTHENTICATED")
    assert "needs a caller assertion" in message
    message = refused(
        await call(nc, "responses/resumeDetached", resume, tokens["panel"]), "PERMISSION_DENIED"
    )
    assert "panel (panel) may not answer the interrupt of turn" in message, message
    # The service issues no assertion to a made-up token, a panel's for a method its
    # role lacks, or another agent's for this agent.
    with pytest.raises(Unauthenticated):
        await assertion_for("tk-made-up", "responses/resumeDetached", "r1")
    with pytest.raises(PermissionDenied, match=r"'panel' \(panel\) may not call"):
        await assertion_for(tokens["panel"], "responses/cancel", "r2")
    with pytest.raises(PermissionDenied, match="may not act for agent 'jobs'"):
        await assertion_for(tokens["stranger"], "responses/turnStatus", "r3")
    # A panel's assertion for another method does not open this one.
    envelope = {"jsonrpc": "2.0", "id": "r4", "method": "responses/resumeDetached"}
    envelope["params"] = resume
    panel_status = await assertion_for(tokens["panel"], "responses/turnStatus", "r4")
    message = refused(await send(nc, envelope, {HEADER: panel_status}), "UNAUTHENTICATED")
    assert "is for responses/turnStatus, not responses/resumeDetached" in message, message
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_PARKED

    # An operator may: the turn goes on to its end.
    done = await call(nc, "responses/resumeDetached", resume, tokens["operator"])
    assert done["result"]["dispatched"] is True, done
    async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
        if frame.event.type.startswith("turn."):
            assert frame.event.type == "turn.done"
            break
    # The panel answers the turn on the thread it made (over NATS: decision 310).
    answered = await call(
        nc, "responses/resumeDetached", {"turn_id": own, "resume": "yes"}, tokens["panel"]
    )
    assert answered["result"]["dispatched"] is True, answered
    # The audit log names whom the bridge acted for: the panel refused by the
    # service, the operator, the panel on its own; the other refusals never reached
    # the service.
    audit = await admin.list_audit(operations_pb2.ListAuditRequest())
    resumes = [(r.actor, r.target, r.outcome) for r in audit.records if r.action == "resume"]
    assert resumes == [
        ("panel (panel) via agent (agent:jobs)", own, "ok"),
        ("operator (operator) via agent (agent:jobs)", turn_id, "ok"),
        ("panel (panel) via agent (agent:jobs)", turn_id, "PERMISSION_DENIED"),
    ]


async def test_responses_cancel_goes_through_caller_auth_and_the_audit_log(
    agents: Agents, nc: Client, admin: AsyncTurnkeeperClient, tokens: dict[str, str]
) -> None:
    await agents.start(graph="approval", extra_env={"TURNKEEPER_TOKEN": tokens["agent"]})
    turn_id = await park(nc, admin, tokens["panel"])
    cancel = {"turn_id": turn_id, "reason": "stop"}

    message = refused(await call(nc, "responses/cancel", cancel, None), "UNAUTHENTICATED")
    assert "needs a caller assertion" in message
    with pytest.raises(PermissionDenied, match=r"'panel' \(panel\) may not call responses/cancel"):
        await assertion_for(tokens["panel"], "responses/cancel", uuid.uuid4().hex)
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_PARKED

    done = await call(nc, "responses/cancel", cancel, tokens["operator"])
    assert done["result"]["status"] == "cancelled", done
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_CANCELLED
    audit = await admin.list_audit(operations_pb2.ListAuditRequest())
    cancels = [(r.actor, r.target, r.outcome) for r in audit.records if r.action == "cancel"]
    assert cancels == [("operator (operator) via agent (agent:jobs)", turn_id, "ok")]


async def test_the_session_transport_sends_an_assertion_never_its_token(
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
        # The panel made the thread (over NATS: decision 310), so it answers it.
        async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
            if frame.event.type == "interrupt":
                break
        await transport.resume(turn_id, "yes")
        assert await state(admin, turn_id) != turns_pb2.TURN_STATE_PARKED
        anonymous = NatsAgentTransport(nc, AGENT, client=panel_client, assert_caller=False)
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
    # A panel starts turns and reads, and reads a thread's graph state (the
    # LangGraph API); it answers interrupts (of its own threads' turns: the service
    # checks, decision 309), but neither cancels nor edits state (decision 283).
    assert list(panel.methods) == [
        "responses/create",
        "responses/turnStatus",
        "responses/resumeDetached",
        "langgraph/describe",
        "langgraph/state",
        "langgraph/history",
    ]
    agent = await admin.introspect(operations_pb2.IntrospectRequest(token=tokens["agent"]))
    assert (agent.role, agent.agent) == ("agent", AGENT)
    assert "responses/resumeDetached" in agent.methods
    assert "responses/cancel" in agent.methods
    unknown = await admin.introspect(operations_pb2.IntrospectRequest(token="tk-nobody"))
    assert unknown.authentication and not unknown.active and not unknown.methods


@pytest.mark.both_backends
async def test_strategies_that_cancel_need_the_callers_right_to_cancel(
    backend: str,
    agents: Agents,
    nc: Client,
    admin: AsyncTurnkeeperClient,
    tokens: dict[str, str],
) -> None:
    """A panel may start turns, not end other turns: an interrupt, a rollback or a
    regenerate through an agent is checked by the service against the caller's
    rights (the assertion the bridge passes on), and audited with the caller."""
    await agents.start(graph="approval", extra_env={"TURNKEEPER_TOKEN": tokens["agent"]})
    parked = await park(nc, admin, tokens["panel"])
    thread = (await admin.get_turn(turns_pb2.GetTurnRequest(turn_id=parked))).turn.thread_id

    def create(strategy: str, **extra: Any) -> dict[str, Any]:
        return {
            "input": {"job": "again", "results": []},
            "thread_id": thread,
            "background": True,
            "multitask_strategy": strategy,
            **extra,
        }

    for strategy in ("interrupt", "rollback"):
        message = refused(
            await call(nc, "responses/create", create(strategy), tokens["panel"]),
            "PERMISSION_DENIED",
        )
        assert "panel (panel) may not start a turn that" in message, message
        assert "CancelTurn right" in message, message
    regenerate = {"input": None, "thread_id": thread, "background": True, "regenerate": True}
    message = refused(
        await call(nc, "responses/create", regenerate, tokens["panel"]), "PERMISSION_DENIED"
    )
    assert "may not regenerate the thread's last answer" in message, message
    assert await state(admin, parked) == turns_pb2.TURN_STATE_PARKED

    # An operator may interrupt: the parked turn is cancelled, the new one runs.
    started = await call(nc, "responses/create", create("interrupt"), tokens["operator"])
    assert started["result"]["cancelled_turn_id"] == parked, started
    assert await state(admin, parked) == turns_pb2.TURN_STATE_CANCELLED
    audit = await admin.list_audit(operations_pb2.ListAuditRequest())
    records = [
        (r.action, r.actor, r.target, r.outcome)
        for r in audit.records
        if r.action in ("start_interrupt", "start_rollback", "regenerate")
    ]
    assert records == [
        ("start_interrupt", "operator (operator) via agent (agent:jobs)", thread, "ok"),
        ("regenerate", "panel (panel) via agent (agent:jobs)", thread, "PERMISSION_DENIED"),
        ("start_rollback", "panel (panel) via agent (agent:jobs)", thread, "PERMISSION_DENIED"),
        ("start_interrupt", "panel (panel) via agent (agent:jobs)", thread, "PERMISSION_DENIED"),
    ]


async def test_a_sniffed_request_gives_away_no_token_and_cannot_be_replayed(
    agents: Agents, nc: Client, admin: AsyncTurnkeeperClient, tokens: dict[str, str]
) -> None:
    """An eavesdropper on the agents' subjects (here with no NATS permissions at all)
    sees assertions, never tokens; an assertion opens nothing at the service, and the
    bridge takes each request once."""
    agent = await agents.start(graph="approval", extra_env={"TURNKEEPER_TOKEN": tokens["agent"]})
    # This NATS has no users at all: the secured bridge says it is not isolated.
    await agent.wait_line(lambda line: "NATS lets this agent read vystak.default.agents.>" in line)
    sniffed: list[tuple[bytes, dict[str, str]]] = []

    async def sniff(msg: Any) -> None:
        sniffed.append((msg.data, dict(msg.headers or {})))

    await nc.subscribe("vystak.default.agents.>", cb=sniff)
    await nc.flush()
    turn_id = await park(nc, admin, tokens["operator"])
    envelope: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": uuid.uuid4().hex,
        "method": "responses/turnStatus",
        "params": {"turn_id": turn_id},
    }
    value = await assertion_for(tokens["operator"], "responses/turnStatus", envelope["id"])
    first = await send(nc, envelope, {HEADER: value})
    assert first["result"]["status"] == "parked", first
    requests = [(data, headers) for data, headers in sniffed if b"responses/" in data]
    assert len(requests) >= 2
    for data, headers in requests:
        assert "Authorization" not in headers
        assert not any(t.encode() in data or t in str(headers) for t in tokens.values())
    # The same request again (a replay of what was sniffed): refused.
    message = refused(await send(nc, envelope, {HEADER: value}), "UNAUTHENTICATED")
    assert "already taken" in message, message
    # The assertion is no bearer token: the service does not take it as one.
    options = ConnectionOptions(target=admin.options.target, bearer_token=value)
    async with AsyncTurnkeeperClient(options) as thief:
        with pytest.raises(Unauthenticated):
            await thief.list_turns(turns_pb2.ListTurnsRequest())
    # Nor does the bridge take it for another method or request.
    other = {**envelope, "id": uuid.uuid4().hex}
    message = refused(await send(nc, other, {HEADER: value}), "UNAUTHENTICATED")
    assert "is for request" in message, message


@pytest.mark.both_backends
async def test_a_panels_run_that_edits_forks_or_answers_is_refused_by_the_service(
    backend: str,
    agents: Agents,
    nc: Client,
    admin: AsyncTurnkeeperClient,
    tokens: dict[str, str],
) -> None:
    """Decision 276 on NATS: a run whose Command updates or jumps, or that starts
    from a checkpoint, is checked by the service (StartTurn, on behalf of the caller
    the bridge passes on) and audited with the caller; a panel cannot even get an
    assertion for langgraph/updateState. (A Command's resume the panel that made the
    thread may send: decision 309, test_the_session_transport_... above.)"""
    await agents.start(graph="approval", extra_env={"TURNKEEPER_TOKEN": tokens["agent"]})
    parked = await park(nc, admin, tokens["panel"])
    thread = (await admin.get_turn(turns_pb2.GetTurnRequest(turn_id=parked))).turn.thread_id

    def run(payload: Any, **options: Any) -> dict[str, Any]:
        return {
            "input": payload,
            "thread_id": thread,
            "background": True,
            "run": options,
        }

    attempts = [
        ("edit_state", run(None, command={"update": {"ok": True}, "goto": "publish"})),
        ("fork", run({"job": "again", "results": []}, checkpoint_id="cp-earlier")),
        ("edit_state", run(None, command={"resume": "approve", "goto": "publish"})),
    ]
    for _, params in attempts:
        refused(await call(nc, "responses/create", params, tokens["panel"]), "PERMISSION_DENIED")
    with pytest.raises(PermissionDenied, match="may not call langgraph/updateState"):
        await assertion_for(tokens["panel"], "langgraph/updateState", uuid.uuid4().hex)
    assert await state(admin, parked) == turns_pb2.TURN_STATE_PARKED
    audit = await admin.list_audit(operations_pb2.ListAuditRequest())
    records = [
        (r.action, r.actor, r.outcome)
        for r in reversed(audit.records)
        if r.action in ("edit_state", "fork", "resume")
    ]
    assert records == [
        (action, "panel (panel) via agent (agent:jobs)", "PERMISSION_DENIED")
        for action, _ in attempts
    ]
