"""The differential suite over a TypeScript project: graphs_ts/ (the graphs of
graphs/differential.py written in LangGraph.js) served by LangGraph.js's own dev
server (`langgraphjs dev`, the reference) and by turnkeeper hosting the same
langgraph.json (`turnkeeper agent`, a Node.js runner per graph), the same client
script against both: every difference must be on docs/langgraph-api.md's
TypeScript allow-list, and every row of it must still differ."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from turnkeeper_server.app import TurnkeeperServer

from tests.differential import compare
from tests.differential.conftest import GRAPHS_TS, js_driver, python_driver
from tests.differential.test_differential import observe, sound, verdict_on
from tests.support.agents import PATIENCE, Agent
from tests.support.langgraph_host import spawn_host
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

# With the Python project's test on one worker: the JS SDK's package is installed once.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.xdist_group("differential"),
]

GRAPH_IDS = tuple(json.loads((GRAPHS_TS / "langgraph.json").read_text())["graphs"])


@pytest.fixture
async def ts_api_url(
    make_service: ServiceFactory, nats_server: NatsServer, built_node_package: Path
) -> AsyncIterator[str]:
    """Turnkeeper (the test's backend) with graphs_ts/ hosted by `turnkeeper agent`:
    returns once each graph's Node.js runner says ready."""
    service: TurnkeeperServer = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0"
    )
    runner = built_node_package / "dist" / "cli" / "graph.js"
    host: Agent = await spawn_host(
        GRAPHS_TS / "langgraph.json",
        service=service.address,
        nats_url=nats_server.url,
        replica="differential-ts",
        extra_env={"TURNKEEPER_NODE_RUNNER": str(runner)},
    )
    try:
        # Seven Node.js processes start at once (each loads LangGraph.js and its
        # graph): on a loaded machine, a bound per runner, not per host.
        for k in range(len(GRAPH_IDS)):

            def ready(_line: str, k: int = k) -> bool:
                return sum(ln.startswith("ready ") for ln in host.lines) > k

            await host.wait_line(ready, PATIENCE * len(GRAPH_IDS))
        assert service.web is not None
        yield service.web.url.rstrip("/")
    finally:
        await host.close()


# The default run on SQLite only: what a LangGraph.js graph changes is the runner's,
# which writes through the service the same on either backend (the Python project's
# test runs both); `pytest --full` adds PostgreSQL.
@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.full)])
async def test_turnkeeper_shows_the_clients_what_langgraphjs_dev_shows(
    ts_reference: Future[dict[str, Any]], ts_api_url: str, js_package: Path | None, backend: str
) -> None:
    seen = await asyncio.wrap_future(ts_reference)
    sound(seen, "langgraphjs dev")
    commands = {"python": python_driver(ts_api_url)}
    if js_package is not None:
        commands["js"] = js_driver(js_package, ts_api_url)
    ours = await observe(commands)
    verdict_on(seen, ours, compare.allow_list(marker=compare.MARKER_TS), backend)
