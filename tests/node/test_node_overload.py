"""A LangGraph.js agent under the TypeScript TurnRunner under load, as a Python bridge
(decisions 381 and 382): it is orphaned only when it is gone (when its lease lapses,
the service asks the owning incarnation over NATS, `turnkeeper/alive`, and the
runner's answer keeps the turn, with a fresh lease, instead of a re-drive); and it
runs at most TURNKEEPER_MAX_TURNS turns at once, a turn past it waiting visibly."""

from __future__ import annotations

import asyncio
import logging
import signal
from pathlib import Path

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.web.langgraph import shapes

from tests.bridge.test_bridge_liveness import Renewals
from tests.support.agents import result
from tests.support.nats import Collector, NatsServer
from tests.support.node import NodeAgents, Watcher, hold_turn
from tests.support.service import ServiceFactory, announced

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

AGENT = "js-live"


async def test_a_lapsed_lease_of_a_live_js_agent_is_renewed_not_redriven(
    node_package: Path,
    make_service: ServiceFactory,
    nats_server: NatsServer,
    bus: tuple[Client, Collector],
    tmp_path: Path,
) -> None:
    # Leases of half a second, reaped every tenth: many lapse while the turn holds.
    service = await make_service(nats_url=nats_server.url, lease_seconds=0.5, reap_interval=0.1)
    renewals = Renewals(asyncio.get_running_loop())
    logging.getLogger("turnkeeper_server.engine").addHandler(renewals)
    nc, _seen = bus
    client = AsyncTurnkeeperClient(ConnectionOptions(target=service.address))
    js = NodeAgents(node_package, service.address, nats_server.url, tmp_path / "side.log", AGENT)
    watcher: Watcher | None = None
    try:
        # Its heartbeats never reach the service (a starved machine at its worst).
        agent = await js.start("js-live-1", hold_work=True, extra_env={"STARVE_HEARTBEATS": "1"})
        watcher = await hold_turn(nc, client, "hold-live", agent=AGENT)
        # Several leases lapse without a heartbeat; each time the runner answers.
        await renewals.reached(3)
        agent.signal(signal.SIGUSR2)  # the work node goes on
        transcript = await watcher.finished()
        assert transcript.resets == 0
        done = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="hold-live"))
        assert (done.state, done.attempts) == (turns_pb2.TURN_STATE_DONE, 0), done
        runs = js.side_log.read_text().splitlines()
        assert runs == [
            "plan hold-live 0",
            "work hold-live 0",
            "holding hold-live",
            "answer hold-live 0",
        ]
    finally:
        logging.getLogger("turnkeeper_server.engine").removeHandler(renewals)
        if watcher is not None:
            await watcher.close()
        await js.close()
        await client.close()


async def test_a_js_turn_past_the_limit_waits_visibly_and_runs_when_a_slot_frees(
    js_agents: NodeAgents,
    bus: tuple[Client, Collector],
    service: TurnkeeperServer,
    client: AsyncTurnkeeperClient,
) -> None:
    nc, _seen = bus
    agent = await js_agents.start(
        "js-limited-1",
        hold_work=True,
        extra_env={"TURNKEEPER_MAX_TURNS": "1"},
    )
    watchers: list[Watcher] = []
    try:
        watchers.append(await hold_turn(nc, client, "hold-first", agent=AGENT))

        # Past the limit: journaled, not refused, and nobody runs it yet.
        params = {"input": "report", "turn_id": "second", "background": True}
        created = await result(nc, "responses/create", params, agent=AGENT)
        assert created["status"] == "queued", created
        second = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="second"))).turn
        assert second.state == turns_pb2.TURN_STATE_RUNNING
        assert not second.HasField("owner")
        await announced(service, lambda: bool(service.engine.directory.full(AGENT)))
        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="second"))
        assert "waits for a free slot" in status.detail, status
        assert "--max-turns 1" in status.detail
        record = service.engine.turns.get("second")
        assert record is not None and shapes.run_status(record) == "pending"

        watchers.append(Watcher(client, "second"))
        agent.signal(signal.SIGUSR2)  # the first turn goes on and frees its slot
        for watcher in watchers:
            await watcher.finished()
        for turn_id in ("hold-first", "second"):
            done = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
            # Neither re-driven nor failed for waiting.
            assert (done.state, done.attempts) == (turns_pb2.TURN_STATE_DONE, 0), done
        runs = [r for r in js_agents.side_log.read_text().splitlines() if "second" in r]
        assert runs == ["plan second 0", "work second 0", "answer second 0"]
        await announced(service, lambda: not service.engine.directory.full(AGENT))
    finally:
        for watcher in watchers:
            await watcher.close()
