"""The TypeScript runner checks its JSON-RPC callers as the Python bridge does
(tests/security/test_jsonrpc_auth.py): with tokens on the service, a caller's token
never goes on NATS; each responses/* request carries a caller assertion the service
issued for it (OperationsService/IssueAssertion), which the runner verifies with its
own agent token and applies. No assertion, a replayed one or one for another method
is UNAUTHENTICATED and the turn stays PARKED; a panel may start and look, and not
regenerate (a panel approves only on its own threads, which the service checks:
decision 309); an operator approves, and the service's audit log names it, since the
runner passes its caller's assertion on (a real Node.js agent process, a real
nats-server)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from turnkeeper._caller_assertion import HEADER, CallerAssertion, key_of, sign, token_digest
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import PermissionDenied, Unauthenticated
from turnkeeper.v1 import operations_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent
from tests.support.nats import NatsServer
from tests.support.node import node_agents
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGENT = "js-approval"
# The audit log's name of the runner's token ("agent", role agent:js-approval).
RUNNER = f"agent (agent:{AGENT})"


@pytest.fixture
async def tokens(tmp_path: Path) -> dict[str, str]:
    return write_tokens(
        tmp_path / "tokens.jsonl",
        {
            "agent": f"agent:{AGENT}",
            "stranger": "agent:stranger",
            "panel": "panel",
            "operator": "operator",
            "admin": "admin",
        },
    )


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


class Callers:
    """JSON-RPC requests to the runner on NATS, as a panel sends them: with an
    assertion the service issued for the caller's token and that request."""

    def __init__(self, nc: Client, address: str) -> None:
        self.nc = nc
        self.address = address

    async def assertion_for(
        self, token: str, method: str, request_id: str, agent: str = AGENT
    ) -> str:
        options = ConnectionOptions(target=self.address, bearer_token=token)
        async with AsyncTurnkeeperClient(options) as client:
            issued = await client.issue_assertion(
                operations_pb2.IssueAssertionRequest(
                    agent=agent, method=method, request_id=request_id
                )
            )
        return issued.assertion

    async def send(self, envelope: dict[str, Any], headers: dict[str, str] | None) -> Any:
        msg = await self.nc.request(
            f"vystak.default.agents.{AGENT}.tasks",
            json.dumps(envelope).encode(),
            timeout=30,
            headers=headers,
        )
        return json.loads(msg.data)

    async def call(self, method: str, params: dict[str, Any], token: str | None) -> Any:
        """One request, with an assertion for `token`'s caller (none for None)."""
        envelope = envelope_of(method, params)
        headers = None
        if token is not None:
            headers = {HEADER: await self.assertion_for(token, method, envelope["id"])}
        return await self.send(envelope, headers)


def envelope_of(method: str, params: dict[str, Any], request_id: str | None = None) -> Any:
    return {
        "jsonrpc": "2.0",
        "id": request_id or uuid.uuid4().hex,
        "method": method,
        "params": params,
    }


def refused(reply: dict[str, Any], code: str) -> str:
    assert "error" in reply, reply
    assert reply["error"]["code"] == -32000, reply
    assert reply["error"]["data"]["code"] == code, reply
    message: str = reply["error"]["message"]
    return message


async def state(admin: AsyncTurnkeeperClient, turn_id: str) -> int:
    return (await admin.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))).state


@dataclass
class Runner:
    """The TypeScript runner of the approval graph with its agent token, and a NATS
    connection that calls it as a given caller."""

    agent: Agent
    nc: Client
    rpc: Callers


@pytest.fixture
async def runner(
    node_package: Path,
    secured: TurnkeeperServer,
    nats_server: NatsServer,
    tokens: dict[str, str],
    tmp_path: Path,
) -> AsyncIterator[Runner]:
    async with node_agents(
        node_package, secured.address, nats_server.url, tmp_path / "side.log", AGENT
    ) as js:
        agent = await js.start(
            "r1", graph="approval", extra_env={"TURNKEEPER_TOKEN": tokens["agent"]}
        )
        nc = await nats.connect(nats_server.url)
        try:
            yield Runner(agent, nc, Callers(nc, secured.address))
        finally:
            await nc.close()


async def test_the_typescript_runner_applies_the_role_matrix(
    runner: Runner, admin: AsyncTurnkeeperClient, tokens: dict[str, str]
) -> None:
    rpc = runner.rpc
    turn_id = uuid.uuid4().hex
    create = {"input": "deploy", "turn_id": turn_id, "background": True}

    # Anonymous: nothing at all, and the reason says what to send.
    message = refused(await rpc.call("responses/create", create, None), "UNAUTHENTICATED")
    assert "caller assertion" in message and HEADER in message, message
    # A bearer token on NATS is no way in: it is never sent to an agent.
    message = refused(
        await rpc.send(
            envelope_of("responses/create", create),
            {"Authorization": f"Bearer {tokens['admin']}"},
        ),
        "UNAUTHENTICATED",
    )
    assert "a bearer token is never sent to an agent" in message, message

    # A panel may start a turn and read its status ...
    created = await rpc.call("responses/create", create, tokens["panel"])
    assert created["result"]["turn_id"] == turn_id, created
    thread_id = created["result"]["thread_id"]
    async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
        if frame.event.type == "interrupt":
            break
    status = await rpc.call("responses/turnStatus", {"turn_id": turn_id}, tokens["panel"])
    assert status["result"]["status"] == "parked", status

    # ... but nobody without the right answers the parked turn.
    resume = {"turn_id": turn_id, "resume": "yes"}
    message = refused(await rpc.call("responses/resumeDetached", resume, None), "UNAUTHENTICATED")
    assert "needs a caller assertion" in message, message
    # The service issues no assertion to a made-up token, a panel's for a method
    # its role lacks (a panel sends resumeDetached, which the service answers only
    # on the threads it owns: decision 309), or another agent's token for this agent.
    with pytest.raises(Unauthenticated):
        await rpc.assertion_for("tk-made-up", "responses/resumeDetached", "r1")
    with pytest.raises(PermissionDenied, match=r"'panel' \(panel\) may not call"):
        await rpc.assertion_for(tokens["panel"], "responses/cancel", "r2")
    with pytest.raises(PermissionDenied, match=f"may not act for agent '{AGENT}'"):
        await rpc.assertion_for(tokens["stranger"], "responses/turnStatus", "r3")
    # A panel's assertion for another method does not open this one.
    panel_status = await rpc.assertion_for(tokens["panel"], "responses/turnStatus", "r4")
    message = refused(
        await rpc.send(
            envelope_of("responses/resumeDetached", resume, "r4"), {HEADER: panel_status}
        ),
        "UNAUTHENTICATED",
    )
    assert "is for responses/turnStatus, not responses/resumeDetached" in message, message
    # The runner applies the methods an assertion names: one signed with this
    # agent's key (as the service signs) for a panel is refused for a method the
    # panel's role lacks.
    forged_by_the_test = sign(
        CallerAssertion(
            agent=AGENT,
            method="responses/resumeDetached",
            request_id="r5",
            name="panel",
            role="panel",
            caller_agent="",
            methods=("responses/create", "responses/turnStatus"),
            expires_at=time.time() + 60,
        ),
        [key_of(token_digest(tokens["agent"]))],
    )
    message = refused(
        await rpc.send(
            envelope_of("responses/resumeDetached", resume, "r5"),
            {HEADER: forged_by_the_test},
        ),
        "PERMISSION_DENIED",
    )
    assert "panel (panel) may not call responses/resumeDetached" in message, message
    # A regenerate ends the thread's live turn: the runner passes the panel's
    # assertion on with StartTurn, and the service refuses the panel.
    regenerate = {"input": None, "thread_id": thread_id, "background": True}
    message = refused(
        await rpc.call("responses/create", {**regenerate, "regenerate": True}, tokens["panel"]),
        "PERMISSION_DENIED",
    )
    assert "may not regenerate the thread's last answer" in message, message
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_PARKED

    # An operator may: the turn goes on to its end. The same request again (a
    # replay of what was on the wire) is refused by the runner.
    envelope = envelope_of("responses/resumeDetached", resume)
    value = await rpc.assertion_for(tokens["operator"], "responses/resumeDetached", envelope["id"])
    done = await rpc.send(envelope, {HEADER: value})
    assert done["result"]["dispatched"] is True, done
    message = refused(await rpc.send(envelope, {HEADER: value}), "UNAUTHENTICATED")
    assert "already taken" in message, message
    async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
        if frame.event.type.startswith("turn."):
            assert frame.event.type == "turn.done"
            break

    # The audit log names the callers the runner acted for; the refusals the
    # runner made itself never reached the service.
    audit = await admin.list_audit(operations_pb2.ListAuditRequest())
    records = [
        (r.action, r.actor, r.target, r.outcome)
        for r in audit.records
        if r.action in ("resume", "regenerate")
    ]
    assert records == [
        ("resume", f"operator (operator) via {RUNNER}", turn_id, "ok"),
        ("regenerate", f"panel (panel) via {RUNNER}", thread_id, "PERMISSION_DENIED"),
    ]


async def test_the_typescript_runner_passes_the_caller_on_with_a_cancel(
    runner: Runner, admin: AsyncTurnkeeperClient, tokens: dict[str, str]
) -> None:
    rpc = runner.rpc
    turn_id = uuid.uuid4().hex
    create = {"input": "deploy", "turn_id": turn_id, "background": True}
    created = await rpc.call("responses/create", create, tokens["panel"])
    assert created["result"]["turn_id"] == turn_id, created
    async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
        if frame.event.type == "interrupt":
            break
    cancel = {"turn_id": turn_id, "reason": "stop"}
    message = refused(await rpc.call("responses/cancel", cancel, None), "UNAUTHENTICATED")
    assert "needs a caller assertion" in message, message
    with pytest.raises(PermissionDenied, match=r"'panel' \(panel\) may not call"):
        await rpc.assertion_for(tokens["panel"], "responses/cancel", uuid.uuid4().hex)
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_PARKED

    done = await rpc.call("responses/cancel", cancel, tokens["operator"])
    assert done["result"]["status"] == "cancelled", done
    assert await state(admin, turn_id) == turns_pb2.TURN_STATE_CANCELLED
    audit = await admin.list_audit(operations_pb2.ListAuditRequest())
    cancels = [(r.actor, r.target, r.outcome) for r in audit.records if r.action == "cancel"]
    assert cancels == [(f"operator (operator) via {RUNNER}", turn_id, "ok")]
