"""The console's agents page (docs/versions.md): served at /console/agents, and the
ListAgents call it polls, over the HTTP side's Connect routes."""

from __future__ import annotations

import asyncio
import json

import nats
from turnkeeper_server.app import TurnkeeperServer

from tests.support.http import Http
from tests.support.nats import NatsServer
from tests.support.service import announced
from tests.versions.test_version_policy import AGENT, version


async def test_the_agents_page_and_its_call_show_each_replicas_graph_version(
    http: Http, nats_server: NatsServer, web_service: TurnkeeperServer
) -> None:
    async with http.session.get(f"{http.base}console/agents") as response:
        assert response.status == 200
        page = await response.text()
    assert "Agents and graph versions" in page and "/console/agents.js" in page
    async with http.session.get(f"{http.base}console/agents.js") as response:
        assert response.status == 200
        assert 'call("ListAgents"' in await response.text()

    v = version("label")
    body = {
        "agent": AGENT,
        "replica": "r-1",
        "incarnation": "i1",
        "graph": {"fingerprint": v.fingerprint, "label": v.label, "shape": v.shape},
    }
    # The service hears the announcement on its own connection: awaited through its
    # directory's hook (tests/support/service.py's announced), which the task takes
    # at its first step, while the connection below is being made.
    directory = web_service.engine.directory
    shown = asyncio.create_task(announced(web_service, lambda: bool(directory.replicas(AGENT))))
    nc = await nats.connect(nats_server.url)
    await nc.publish(f"vystak.default.agents.{AGENT}.announce", json.dumps(body).encode())
    await nc.flush()
    await nc.close()
    await shown
    status, answer = await http.call("ListAgents", {})
    assert status == 200, answer
    [agent] = answer["agents"]
    assert agent["agent"] == AGENT and agent["policy"] == "compatible"
    assert agent["replicas"][0]["graph"] == {"fingerprint": v.fingerprint, "label": "v1.1"}
