"""The TypeScript runner checks its JSON-RPC callers as the Python bridge does: with
tokens on the service, an anonymous responses/resumeDetached is refused and the
turn stays PARKED, a panel token may start and look but not approve, an operator
token approves (a real Node.js agent process, a real nats-server)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.node import prepare_package, spawn_agent
from tests.support.security import write_tokens
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGENT = "js-approval"


@pytest.fixture(scope="module")
def node_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_package(tmp_path_factory.mktemp("node-callers"))


@pytest.fixture
async def tokens(tmp_path: Path) -> dict[str, str]:
    return write_tokens(
        tmp_path / "tokens.jsonl",
        {"agent": f"agent:{AGENT}", "panel": "panel", "operator": "operator", "admin": "admin"},
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


async def call(nc: Client, method: str, params: dict[str, Any], token: str | None) -> Any:
    envelope = {"jsonrpc": "2.0", "id": uuid.uuid4().hex, "method": method, "params": params}
    msg = await nc.request(
        f"vystak.default.agents.{AGENT}.tasks",
        json.dumps(envelope).encode(),
        timeout=30,
        headers={"Authorization": f"Bearer {token}"} if token else None,
    )
    return json.loads(msg.data)


def refused(reply: dict[str, Any], code: str) -> str:
    assert reply.get("error", {}).get("data", {}).get("code") == code, reply
    message: str = reply["error"]["message"]
    return message


async def test_the_typescript_runner_applies_the_role_matrix(
    node_package: Path,
    secured: TurnkeeperServer,
    nats_server: NatsServer,
    admin: AsyncTurnkeeperClient,
    tokens: dict[str, str],
    tmp_path: Path,
) -> None:
    agent = await spawn_agent(
        node_package,
        service=secured.address,
        nats_url=nats_server.url,
        agent=AGENT,
        replica="r1",
        side_log=tmp_path / "side.log",
        graph="approval",
        extra_env={"TURNKEEPER_TOKEN": tokens["agent"]},
    )
    nc = await nats.connect(nats_server.url)
    try:
        await agent.ready()
        turn_id = uuid.uuid4().hex
        create = {"input": "deploy", "turn_id": turn_id, "background": True}
        assert "bearer token" in refused(
            await call(nc, "responses/create", create, None), "UNAUTHENTICATED"
        )
        created = await call(nc, "responses/create", create, tokens["panel"])
        assert created["result"]["turn_id"] == turn_id, created
        async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
            if frame.event.type == "interrupt":
                break

        resume = {"turn_id": turn_id, "resume": "yes"}
        refused(await call(nc, "responses/resumeDetached", resume, None), "UNAUTHENTICATED")
        assert "may not call responses/resumeDetached" in refused(
            await call(nc, "responses/resumeDetached", resume, tokens["panel"]),
            "PERMISSION_DENIED",
        )
        status = await admin.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
        assert status.state == turns_pb2.TURN_STATE_PARKED

        done = await call(nc, "responses/resumeDetached", resume, tokens["operator"])
        assert "result" in done, done
        async for frame in admin.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
            if frame.event.type.startswith("turn."):
                assert frame.event.type == "turn.done"
                break
    finally:
        await nc.close()
        await agent.close()
