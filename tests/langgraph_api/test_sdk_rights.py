"""The human-in-the-loop gate over the LangGraph API with the service's tokens
(decision 283): editing a thread's state (update_state, a Command's update and goto)
and forking from a checkpoint are rights of their own, which a panel token does not
hold (answering an interrupt it holds on its own threads only, decision 309); a parked thread's checkpoints are written by its
turn only; and every attempt is in the audit log under the caller that made it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import operations_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent
from tests.support.langgraph_host import hosted
from tests.support.nats import NatsServer

pytestmark = [pytest.mark.slow, pytest.mark.both_backends, pytest.mark.timeout(180)]

PAYMENT = "payment"
CONFIG = Path(__file__).resolve().parent / "graphs" / "payment.json"
ROLES = {"agent": f"agent:{PAYMENT}", "panel": "panel", "operator": "operator"}


@pytest.fixture
def roles() -> dict[str, str]:
    return ROLES


@pytest.fixture
async def payment_host(
    service: TurnkeeperServer, nats_server: NatsServer, tokens: dict[str, str]
) -> AsyncIterator[Agent]:
    async with hosted(
        CONFIG, service, nats_server, replica="lg-pay", token=tokens["agent"]
    ) as agent:
        yield agent


@pytest.fixture
async def clients(
    api_url: str, tokens: dict[str, str], payment_host: Agent
) -> AsyncIterator[tuple[LangGraphClient, LangGraphClient]]:
    panel = get_client(url=api_url, api_key=tokens["panel"])
    operator = get_client(url=api_url, api_key=tokens["operator"])
    try:
        yield panel, operator
    finally:
        for sdk in (panel, operator):
            await sdk.http.client.aclose()


async def _refused(status: int, call: Awaitable[Any]) -> None:
    """The call is answered `status` (runs.wait raises httpx's own error for it)."""
    with pytest.raises(httpx.HTTPStatusError) as refusal:
        await call
    assert refusal.value.response.status_code == status


async def _receipts(sdk: LangGraphClient, thread_id: str) -> list[Any]:
    """Every effect any run of the thread made (the payment's ledger rows)."""
    made = []
    for run in await sdk.runs.list(thread_id):
        listed: Any = await sdk.http.get(f"/threads/{thread_id}/runs/{run['run_id']}/effects")
        made += listed["effects"]
    return made


async def test_a_panel_cannot_approve_the_payment_gate_and_the_operators_denial_holds(
    service: TurnkeeperServer,
    tokens: dict[str, str],
    clients: tuple[LangGraphClient, LangGraphClient],
) -> None:
    panel, operator = clients
    thread = await panel.threads.create()
    thread_id = thread["thread_id"]
    run = await panel.runs.create(thread_id, PAYMENT, input={"amount": 500})
    await panel.runs.join(thread_id, run["run_id"])
    parked: Any = await operator.threads.get_state(thread_id)
    assert parked["next"] == ["gate"]

    # The panel approves the gate itself: an edit of the state, and a goto past it.
    await _refused(403, panel.threads.update_state(thread_id, {"approved": True}, as_node="gate"))
    await _refused(
        403,
        panel.runs.wait(thread_id, PAYMENT, command={"update": {"approved": True}, "goto": "act"}),
    )
    # A run from an earlier checkpoint (a fork) is an edit too.
    await _refused(
        403,
        panel.runs.wait(
            thread_id, PAYMENT, input={"amount": 1}, checkpoint_id=parked["checkpoint_id"]
        ),
    )
    # Answering the interrupt is the operator's, and the thread owner's (this panel
    # made the thread: test_sdk_owner_answers.py shows it answering, and another
    # panel not); here the operator answers first.
    # Not even an operator writes a parked thread's checkpoints beside its turn.
    await _refused(
        409, operator.threads.update_state(thread_id, {"approved": True}, as_node="gate")
    )

    denied: Any = await operator.runs.wait(thread_id, PAYMENT, command={"resume": False})
    assert denied["approved"] is False and not denied.get("receipts")

    # After the denial: the panel's goto past the gate is still refused.
    await _refused(
        403,
        panel.runs.wait(thread_id, PAYMENT, command={"update": {"approved": True}, "goto": "act"}),
    )
    await _refused(403, panel.threads.update_state(thread_id, {"approved": True}, as_node="gate"))
    final: Any = await operator.threads.get_state(thread_id)
    assert final["values"]["approved"] is False and not final["values"].get("receipts")
    assert await _receipts(operator, thread_id) == []

    # A run that would interrupt the thread's live run is audited under its caller,
    # the service starting it itself (decision 370) as the agent's StartTurn did.
    again = await operator.runs.create(
        thread_id, PAYMENT, input={"amount": 2}, multitask_strategy="interrupt"
    )
    await operator.runs.join(thread_id, again["run_id"])

    # The audit names who tried, and who decided.
    options = ConnectionOptions(target=service.address, bearer_token=tokens["operator"])
    async with AsyncTurnkeeperClient(options) as client:
        audit = await client.list_audit(operations_pb2.ListAuditRequest())
    records = [
        (r.action, r.actor.split(" via ")[0], r.outcome)
        for r in reversed(audit.records)
        if r.target in (thread_id, run["run_id"])
    ]
    assert records == [
        ("edit_state", "panel (panel)", "PERMISSION_DENIED"),
        ("edit_state", "panel (panel)", "PERMISSION_DENIED"),
        ("fork", "panel (panel)", "PERMISSION_DENIED"),
        ("edit_state", "operator (operator)", "FAILED_PRECONDITION"),
        ("resume", "operator (operator)", "ok"),
        ("edit_state", "panel (panel)", "PERMISSION_DENIED"),
        ("edit_state", "panel (panel)", "PERMISSION_DENIED"),
        ("start_interrupt", "operator (operator)", "ok"),
    ]
