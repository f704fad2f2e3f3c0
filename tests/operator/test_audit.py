"""The audit log: one record per operator action, with who did it and the outcome,
read over gRPC (ListAudit) and with `turnkeeper audit` (the real console script)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import PermissionDenied, WrongState
from turnkeeper.v1 import checkpoints_pb2, operations_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.security import write_tokens
from tests.support.service import ServiceFactory
from tests.support.turns import events, value

# The audit table is the store's: the same records on SQLite and PostgreSQL.
pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends]

ROLES = {"alice": "operator", "root": "admin", "panel": "panel", "alpha": "agent:alpha"}


@pytest.fixture
async def tokens(tmp_path: Path) -> dict[str, str]:
    return write_tokens(tmp_path / "tokens.jsonl", ROLES)


@pytest.fixture
async def service(
    make_service: ServiceFactory, tmp_path: Path, tokens: dict[str, str]
) -> TurnkeeperServer:
    return await make_service(tokens_file=tmp_path / "tokens.jsonl", tokens_poll_seconds=0)


@pytest.fixture
async def clients(
    service: TurnkeeperServer, tokens: dict[str, str]
) -> AsyncIterator[dict[str, AsyncTurnkeeperClient]]:
    made = {
        name: AsyncTurnkeeperClient(ConnectionOptions(target=service.address, bearer_token=token))
        for name, token in tokens.items()
    }
    yield made
    for client in made.values():
        await client.close()


async def parked(agent: AsyncTurnkeeperClient, turn_id: str) -> None:
    await agent.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id=turn_id,
            thread_id=f"th-{turn_id}",
            agent="alpha",
            input=value({"q": turn_id}),
            replica="r1",
            incarnation="i1",
        )
    )
    await agent.park_turn(
        turns_pb2.ParkTurnRequest(
            turn_id=turn_id, attempt=0, interrupt=value("ok?"), events=events(1, "interrupt")
        )
    )


async def cli_audit(address: str, token: str) -> list[dict[str, Any]]:
    command = shutil.which("turnkeeper")
    assert command is not None
    proc = await asyncio.create_subprocess_exec(
        command,
        "audit",
        "--json",
        "--address",
        address,
        env={**os.environ, "TURNKEEPER_TOKEN": token},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    records: list[dict[str, Any]] = json.loads(out)["records"]
    return records


async def test_one_record_per_operator_action_with_the_identity(
    service: TurnkeeperServer,
    clients: dict[str, AsyncTurnkeeperClient],
    tokens: dict[str, str],
    tmp_path: Path,
) -> None:
    alice, root, agent = clients["alice"], clients["root"], clients["alpha"]
    await parked(agent, "t1")
    await alice.resume_detached(turns_pb2.ResumeDetachedRequest(turn_id="t1", resume=value(1)))
    # The same again: refused (the turn is no longer PARKED), and recorded so.
    with pytest.raises(WrongState):
        await alice.resume_detached(turns_pb2.ResumeDetachedRequest(turn_id="t1", resume=value(2)))
    await root.redrive(turns_pb2.RedriveRequest(turn_id="t1", force=True))
    await agent.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id="t2", thread_id="th-t2", agent="alpha", input=value({"q": 2})
        )
    )
    await agent.finish_turn(
        turns_pb2.FinishTurnRequest(turn_id="t2", attempt=0, outcome=turns_pb2.OUTCOME_DONE)
    )
    await root.delete_thread(checkpoints_pb2.DeleteThreadRequest(thread_id="th-t2"))
    # Bridges' own recovery is not an operator action.
    await agent.redrive(turns_pb2.RedriveRequest(agent="alpha", replica="r1", incarnation="i-next"))
    # A token change: bob added, reported by the reload.
    path = tmp_path / "tokens.jsonl"
    path.write_text(
        path.read_text() + json.dumps({"sha256": "ab" * 32, "role": "panel", "name": "bob"}) + "\n"
    )
    service.reload_tokens("SIGHUP")
    await service.audit.flush()

    records = await cli_audit(service.address, tokens["alice"])
    seen = [(r["actor"], r["action"], r["target"], r["outcome"]) for r in reversed(records)]
    assert seen == [
        ("alice (operator)", "resume", "t1", "ok"),
        ("alice (operator)", "resume", "t1", "FAILED_PRECONDITION"),
        ("root (admin)", "redrive", "t1", "ok"),
        ("root (admin)", "delete_thread", "th-t2", "ok"),
        ("service (SIGHUP)", "tokens_reload", str(path), "ok"),
    ]
    assert "token 'bob' (panel)" in records[0]["detail"]
    assert "PARKED" in records[-2]["detail"], records[-2]
    assert all(r["at"] for r in records)

    # Over gRPC too, paged; a panel may not read it.
    first = await alice.list_audit(operations_pb2.ListAuditRequest(page_size=2))
    assert [r.id for r in first.records] == [records[0]["id"], records[1]["id"]]
    rest = await alice.list_audit(operations_pb2.ListAuditRequest(page_token=first.next_page_token))
    assert [r.id for r in rest.records] == [r["id"] for r in records[2:]]
    assert not rest.next_page_token
    with pytest.raises(PermissionDenied):
        await clients["panel"].list_audit(operations_pb2.ListAuditRequest())


async def test_cancel_and_erasure_with_cancel_are_recorded(
    service: TurnkeeperServer, clients: dict[str, AsyncTurnkeeperClient]
) -> None:
    alice, root, agent = clients["alice"], clients["root"], clients["alpha"]
    await parked(agent, "t1")
    await alice.cancel_turn(turns_pb2.CancelTurnRequest(turn_id="t1", reason="stop"))
    # Over already: refused, and recorded so.
    with pytest.raises(WrongState):
        await alice.cancel_turn(turns_pb2.CancelTurnRequest(turn_id="t1"))
    # An agent token cancels its own turns (a bridge's `responses/cancel`).
    await parked(agent, "t2")
    await agent.cancel_turn(turns_pb2.CancelTurnRequest(turn_id="t2"))
    # Erasing a thread whose turn is live, cancelling it on the way.
    await parked(agent, "t3")
    erased = await root.delete_thread(
        checkpoints_pb2.DeleteThreadRequest(thread_id="th-t3", cancel=True)
    )
    assert erased.cancelled_turn_id == "t3"

    records = (await alice.list_audit(operations_pb2.ListAuditRequest(page_size=10))).records
    seen = [(r.actor, r.action, r.target, r.outcome) for r in reversed(records)]
    assert seen == [
        ("alice (operator)", "cancel", "t1", "ok"),
        ("alice (operator)", "cancel", "t1", "FAILED_PRECONDITION"),
        ("alpha (agent:alpha)", "cancel", "t2", "ok"),
        ("root (admin)", "delete_thread", "th-t3", "ok"),
    ]
    assert "CANCELLED" in records[-2].detail, records[-2]
