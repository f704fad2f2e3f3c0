"""The bridge against a service with mutual TLS and tokens, configured the way a
deployment configures it: from the environment (TURNKEEPER_TLS_CA,
TURNKEEPER_TLS_CLIENT_CERT, TURNKEEPER_TLS_CLIENT_KEY, TURNKEEPER_TOKEN, the CLI's
names). With its agent's token it runs turns (StartTurn, checkpoints through
RemoteSaver, events, FinishTurn); with a wrong token it stays up and says why on
/healthz instead of hanging; with another agent's token it refuses to start."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import operator
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import nats
import pytest
from langgraph.graph import END, START, StateGraph
from turnkeeper.agent.bridge import Bridge, BridgeConfig
from turnkeeper.agent.bridge._health import get
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import PermissionDenied
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Panel, result
from tests.support.nats import NatsServer
from tests.support.security import CertificateAuthority, Issued, write_tokens
from tests.support.service import ServiceFactory

pytestmark = pytest.mark.timeout(60)

AGENT = "secure"


class State(TypedDict):
    question: str
    results: Annotated[list[str], operator.add]


def build(ran: list[str]) -> StateGraph[Any, Any, Any, Any]:
    def first(state: State) -> dict[str, Any]:
        ran.append("first")
        return {"results": [f"first: {state['question']}"]}

    def second(state: State) -> dict[str, Any]:
        ran.append("second")
        return {"results": ["second"]}

    builder = StateGraph(State)
    builder.add_node("first", first)
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder


@dataclasses.dataclass
class Secured:
    service: TurnkeeperServer
    nats_url: str
    ca: CertificateAuthority
    client_cert: Issued
    tokens: dict[str, str]

    def env(self, token: str) -> dict[str, str]:
        """The agent process's environment."""
        return {
            "TURNKEEPER_AGENT": AGENT,
            "TURNKEEPER_ADDRESS": self.service.address,
            "NATS_URL": self.nats_url,
            "TURNKEEPER_REPLICA": "r-secure",
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            "TURNKEEPER_SHUTDOWN_GRACE": "1",
            "TURNKEEPER_TLS_CA": str(self.ca.files.cert),
            "TURNKEEPER_TLS_CLIENT_CERT": str(self.client_cert.cert),
            "TURNKEEPER_TLS_CLIENT_KEY": str(self.client_cert.key),
            "TURNKEEPER_TOKEN": token,
        }

    def admin(self) -> AsyncTurnkeeperClient:
        return AsyncTurnkeeperClient(
            ConnectionOptions(
                target=self.service.address,
                root_certificates=self.ca.files.cert,
                client_certificate=self.client_cert.cert,
                client_key=self.client_cert.key,
                bearer_token=self.tokens["admin"],
            )
        )


@pytest.fixture
async def secured(make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path) -> Secured:
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = CertificateAuthority(pki, "ca")
    server = ca.issue("server", server=True)
    tokens = write_tokens(
        tmp_path / "tokens.jsonl",
        {"agent": f"agent:{AGENT}", "stranger": "agent:stranger", "admin": "admin"},
    )
    service = await make_service(
        nats_url=nats_server.url,
        tls_cert=server.cert,
        tls_key=server.key,
        tls_client_ca=ca.files.cert,
        tokens_file=tmp_path / "tokens.jsonl",
    )
    return Secured(service, nats_server.url, ca, ca.issue("client", server=False), tokens)


@pytest.fixture
async def admin(secured: Secured) -> AsyncIterator[AsyncTurnkeeperClient]:
    async with secured.admin() as client:
        yield client


async def test_a_bridge_with_its_agent_token_over_mutual_tls_runs_turns(
    secured: Secured, admin: AsyncTurnkeeperClient
) -> None:
    config = BridgeConfig.from_env(env=secured.env(secured.tokens["agent"]))
    assert config.service.bearer_token == secured.tokens["agent"]
    assert config.service.secure and config.service.client_key is not None

    ran: list[str] = []
    nc = await nats.connect(secured.nats_url)
    try:
        async with Bridge(build(ran), config) as bridge:
            await bridge.wait_subscribed()
            assert await get("127.0.0.1", bridge.health.port) == (200, "ok\n")

            async def run(params: dict[str, Any]) -> list[tuple[int, str, Any]]:
                created = await result(
                    nc,
                    "responses/create",
                    params | {"background": True},
                    agent=AGENT,
                    caller=admin.options,
                )
                assert created["status"] == "in_progress", created
                panel = Panel()
                panel.start(admin, created["turn_id"])
                return await panel.ended()

            shown = await run({"input": {"question": "q"}, "thread_id": "th-secure"})
            assert [t for _, t, _ in shown] == ["step", "step", "final", "turn.done"]
            assert shown[-2][2]["output"]["results"] == ["first: q", "second"]

            # Reading its own thread's checkpoints (regenerate, input null) works
            # with the agent token; a thread it never ran on is closed to it, which
            # reads as nothing pending.
            shown = await run({"input": None, "regenerate": True, "thread_id": "th-secure"})
            assert [t for _, t, _ in shown][-1] == "turn.done"
            assert ran == ["first", "second"] * 2
            for thread_id in ("th-secure", "th-unknown"):
                nothing = await result(
                    nc,
                    "responses/create",
                    {"input": None, "thread_id": thread_id, "background": True},
                    agent=AGENT,
                    caller=admin.options,
                )
                assert nothing["turn_id"] is None and nothing["status"] == "completed"
    finally:
        await nc.close()


async def test_a_wrong_token_leaves_the_bridge_unhealthy_not_hanging(
    secured: Secured, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="turnkeeper.agent.bridge._bridge")
    # The startup loop's log line and /healthz's own status check race; await the line.
    refused = asyncio.Event()
    loop = asyncio.get_running_loop()

    class Refused(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "refused this bridge's credentials" in record.getMessage():
                loop.call_soon_threadsafe(refused.set)

    watcher = Refused()
    logging.getLogger("turnkeeper.agent.bridge._bridge").addHandler(watcher)
    bridge = Bridge(build([]), BridgeConfig.from_env(env=secured.env("tk-not-a-token")))
    starting = asyncio.create_task(bridge.start())
    try:

        async def healthz() -> tuple[int, str]:
            while True:  # until start() has bound the port
                if bridge.health.port:
                    return await get("127.0.0.1", bridge.health.port, timeout=3)
                await asyncio.sleep(0.01)

        code, reason = await asyncio.wait_for(healthz(), 10)
        assert code == 503
        assert "UNAUTHENTICATED" in reason and "TURNKEEPER_TOKEN" in reason, reason
        await asyncio.wait_for(refused.wait(), 10)
        assert not starting.done()  # still waiting for the service to accept it
    finally:
        logging.getLogger("turnkeeper.agent.bridge._bridge").removeHandler(watcher)
        await asyncio.wait_for(bridge.shutdown(), 10)
        await asyncio.wait_for(starting, 10)  # start() gives up once shut down
    with pytest.raises(ConnectionRefusedError):
        await get("127.0.0.1", bridge.health.port)


async def test_another_agents_token_fails_the_start(secured: Secured) -> None:
    config = BridgeConfig.from_env(env=secured.env(secured.tokens["stranger"]))
    bridge = Bridge(build([]), config)
    # Its startup Redrive is for an agent the token does not speak for.
    with pytest.raises(PermissionDenied):
        await asyncio.wait_for(bridge.start(), 20)
    await bridge.shutdown()
