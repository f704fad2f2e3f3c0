"""LangGraph's JS SDK (@langchain/langgraph-sdk from npm), unchanged, against
turnkeeper: every assistants, threads and runs method it offers that the issue lists
(js/sdk_tour.mjs), on the worker's shared deployment (its thread's metadata a user
of its own, which its search finds alone), and a stream that outlives a SIGKILL of
the agent running it, on a deployment of its own."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
from turnkeeper_server.app import TurnkeeperServer

from tests.support.langgraph_host import THREADPLANE, hosts_for
from tests.support.nats import NatsServer
from tests.support.node import NO_PROXY_ENV, NODE, npm_ci

# On one xdist worker: the module-scoped npm install is done once, not once per worker.
# The tour of every method runs on both backends; the SIGKILL on SQLite alone (decision
# 710): its PostgreSQL side, a killed agent's run re-driven and its stream resumed, is
# tests/langgraph_api/test_sdk_crash.py's on both backends.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.xdist_group("langgraph-js-sdk"),
]

JS = Path(__file__).resolve().parent / "js"
STEPS = ["analyze", "plan", "generate"]


@pytest.fixture(scope="module")
def sdk_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of js/ with its locked packages installed (`npm ci`)."""
    if NODE is None or shutil.which("npm") is None:
        pytest.skip(reason="node and npm are not on PATH: the JS SDK cannot be run")
    package = tmp_path_factory.mktemp("langgraph-js") / "js"
    shutil.copytree(JS, package, ignore=shutil.ignore_patterns("node_modules"))
    npm_ci(package)
    return package


async def node(package: Path, *args: str) -> asyncio.subprocess.Process:
    assert NODE is not None
    return await asyncio.create_subprocess_exec(
        NODE,
        str(package / "sdk_tour.mjs"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **NO_PROXY_ENV},
    )


@pytest.mark.both_backends
@pytest.mark.shared_deployment
async def test_every_method_of_the_js_sdk(sdk_package: Path, served: str) -> None:
    user = f"ada-{uuid.uuid4().hex[:12]}"
    proc = await node(sdk_package, served, "tour", user)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    tour: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    assert tour["assistants"] == ["approval", "durable-execution", "effects"]
    assert tour["assistant"] == "durable-execution"
    assert {"analyze", "plan", "generate"} <= set(tour["graphNodes"])
    assert "messages" in tour["schemaKeys"]
    assert tour["created"] == "idle" and tour["duplicate"] == 409
    assert tour["found"] == [tour["threadId"]]
    assert tour["updated"] == {"user": user, "team": "red"}
    assert tour["streamEvents"][0] == "metadata"
    assert tour["updates"] == STEPS
    assert tour["lastValues"]["step"] == "generate" == tour["state"]["step"]
    assert tour["state"] == tour["lastValues"]
    assert tour["historySteps"][:3] == ["generate", "plan", "analyze"]
    assert tour["earlierNext"] == ["generate"]
    assert tour["edited"] and tour["afterEditNext"] == ["generate"]
    assert tour["joined"] == "generate" and tour["got"] == "success"
    assert tour["listed"] == ["success", "success"]
    assert tour["joinStreamUpdates"] == STEPS
    assert tour["waited"] == "generate"
    assert tour["batched"] == ["generate", "generate"]
    # As on LangGraph's server: an interrupted thread takes a new run (it is not
    # busy), and a resume sent while that run goes on waits for it (enqueue, the
    # default) and answers the interrupt it stops at.
    assert tour["interrupted"] == "interrupted" and tour["busy"] == 200
    assert tour["resumed"] == "approved"
    assert tour["cancelled"] == "interrupted"
    assert tour["cancelledMany"] == "interrupted" and tour["noneToCancel"] == 404
    assert tour["copied"] is True and tour["deleted"] == 404
    assert tour["unknownAssistant"] == 404 and tour["badMode"] == 422


async def test_a_js_stream_outlives_a_sigkill_of_its_agent(
    sdk_package: Path, api_url: str, service: TurnkeeperServer, nats_server: NatsServer
) -> None:
    lines: list[dict[str, Any]] = []
    async with hosts_for(
        THREADPLANE, service, nats_server, replica="lg-js-crash", step_delay=1.0
    ) as hosts:
        first = await hosts.start()
        proc = await node(sdk_package, api_url, "stream")
        assert proc.stdout is not None
        try:

            async def until(predicate: Any) -> None:
                while not any(predicate(line) for line in lines):
                    raw = await proc.stdout.readline()  # type: ignore[union-attr]
                    assert raw, "the JS stream ended early"
                    lines.append(json.loads(raw))

            await until(lambda m: m.get("event") == "updates" and "analyze" in m["data"])
            await first.kill()  # mid-`plan`
            # The re-drive needs no window: its steps take no time on the next host.
            await hosts.start(step_delay=0)
            await until(lambda m: "final" in m)
            assert await proc.wait() == 0
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    parts = [m for m in lines if "event" in m]
    updates = [next(iter(m["data"])) for m in parts if m["event"] == "updates"]
    assert updates == STEPS
    values = [m["data"] for m in parts if m["event"] == "values"]
    final = next(m["final"] for m in lines if "final" in m)
    assert values[-1] == final and final["step"] == "generate"
