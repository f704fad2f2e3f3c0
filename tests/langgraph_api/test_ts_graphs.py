"""A langgraph.json whose graphs are LangGraph.js files (tests/langgraph_api/ts_project)
hosted by `turnkeeper agent langgraph.json`, which serves each under the TypeScript
runner (clients/node, `turnkeeper-graph`), driven by LangGraph's Python SDK
unchanged: the assistants are listed and described, a streamed run shows its
values, updates and messages, the thread's state and history read and write
through the graph, an interrupt is answered, and a SIGKILL of the Node.js process
mid-run is re-driven to the uninterrupted run's answer."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import PATIENCE, Agent
from tests.support.langgraph_host import spawn_host
from tests.support.nats import NatsServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROJECT = Path(__file__).resolve().parent / "ts_project" / "langgraph.json"
GRAPHS = ("ts_chat", "ts_approval")


@pytest.fixture
def node_package(built_node_package: Path) -> Path:
    """clients/node, installed and built once per worker (tests/support/fixtures.py)."""
    return built_node_package


async def start_ts_host(
    node_package: Path, service: TurnkeeperServer, nats_server: NatsServer
) -> Agent:
    """The host with a Node.js runner per graph; returns once each says ready."""
    host = await spawn_host(
        PROJECT,
        service=service.address,
        nats_url=nats_server.url,
        replica="ts-host",
        extra_env={"TURNKEEPER_NODE_RUNNER": str(node_package / "dist" / "cli" / "graph.js")},
    )
    for k in range(len(GRAPHS)):

        def ready(_line: str, k: int = k) -> bool:
            return sum(ln.startswith("ready ") for ln in host.lines) > k

        await host.wait_line(ready, PATIENCE)
    return host


def runner_pid(host: Agent, graph: str) -> int:
    """The pid of the Node.js runner serving `graph`, as the host logged it."""
    pattern = re.compile(rf"graph {graph}: served by the Node\.js runner \(pid (\d+)\)")
    found = [int(m.group(1)) for line in host.lines if (m := pattern.search(line))]
    assert found, host.output()
    return found[-1]


@pytest.fixture
async def sdk(service: TurnkeeperServer) -> AsyncIterator[LangGraphClient]:
    assert service.web is not None
    client = get_client(url=service.web.url.rstrip("/"))
    try:
        yield client
    finally:
        await client.http.client.aclose()


def question(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text, "id": f"q-{text}"}]}


def conversation(values: Any) -> list[tuple[str, str]]:
    return [(m["type"], m["content"]) for m in values["messages"]]


async def test_a_typescript_langgraph_project_is_served_as_assistants(
    node_package: Path,
    service: TurnkeeperServer,
    nats_server: NatsServer,
    sdk: LangGraphClient,
) -> None:
    host = await start_ts_host(node_package, service, nats_server)
    try:
        listed = await sdk.assistants.search()
        assert {a["graph_id"] for a in listed} >= set(GRAPHS)
        chat = next(a for a in listed if a["graph_id"] == "ts_chat")

        drawn = await sdk.assistants.get_graph(chat["assistant_id"])
        assert {n["id"] for n in drawn["nodes"]} >= {"__start__", "reply", "__end__"}
        assert {"source": "__start__", "target": "reply"}.items() <= drawn["edges"][
            0
        ].items() or any(
            e["source"] == "__start__" and e["target"] == "reply" for e in drawn["edges"]
        )
        schemas: Any = await sdk.assistants.get_schemas(chat["assistant_id"])
        assert "messages" in schemas["state_schema"]["properties"]

        thread = await sdk.threads.create()
        parts = [
            p
            async for p in sdk.runs.stream(
                thread["thread_id"],
                "ts_chat",
                input=question("hello"),
                stream_mode=["values", "updates", "messages-tuple"],
            )
        ]
        events = [p.event for p in parts]
        assert events[0] == "metadata"
        assert "values" in events and "updates" in events
        updates = [p.data for p in parts if p.event == "updates"]
        assert [next(iter(u)) for u in updates] == ["reply"]
        reply = updates[0]["reply"]["messages"][-1]
        assert (reply["type"], reply["content"]) == ("ai", "you said hello")
        tokens = [p.data[0]["content"] for p in parts if p.event == "messages"]
        assert "".join(tokens) == "you said hello", tokens
        final = [p.data for p in parts if p.event == "values"][-1]
        assert conversation(final) == [("human", "hello"), ("ai", "you said hello")]
        # The tokens are parts of the message the node returned: one id.
        ids = {p.data[0]["id"] for p in parts if p.event == "messages"}
        assert ids == {final["messages"][-1]["id"]}, ids

        state: Any = await sdk.threads.get_state(thread["thread_id"])
        assert state["values"] == final and state["next"] == []
        history: Any = await sdk.threads.get_history(thread["thread_id"], limit=10)
        assert history[0]["checkpoint_id"] == state["checkpoint_id"]
        assert [h["metadata"]["source"] for h in history][-1] == "input"

        written = await sdk.threads.update_state(
            thread["thread_id"], {"messages": [{"role": "user", "content": "edited", "id": "e-1"}]}
        )
        assert written["checkpoint"]["checkpoint_id"] != state["checkpoint_id"]
        edited = await sdk.threads.get_state(thread["thread_id"])
        assert conversation(edited["values"])[-1] == ("human", "edited")
    finally:
        await host.close()


async def test_an_interrupt_in_a_typescript_graph_is_answered_with_a_resume(
    node_package: Path,
    service: TurnkeeperServer,
    nats_server: NatsServer,
    sdk: LangGraphClient,
) -> None:
    host = await start_ts_host(node_package, service, nats_server)
    try:
        thread = await sdk.threads.create()
        tid = thread["thread_id"]
        first: Any = await sdk.runs.wait(tid, "ts_approval", input={"topic": "tea"})
        assert first["__interrupt__"][0]["value"] == {"question": "approve a note on tea?"}
        paused = await sdk.threads.get_state(tid)
        assert paused["next"] == ["review"]
        assert paused["interrupts"][0]["value"] == {"question": "approve a note on tea?"}

        resumed = await sdk.runs.wait(tid, "ts_approval", command={"resume": "yes"})
        assert resumed == {"topic": "tea", "draft": "a note on tea (yes)", "verdict": "yes"}
        done = await sdk.threads.get_state(tid)
        assert done["next"] == [] and done["values"] == resumed
    finally:
        await host.close()


async def test_a_sigkill_of_the_node_runner_mid_run_is_re_driven(
    node_package: Path,
    service: TurnkeeperServer,
    nats_server: NatsServer,
    sdk: LangGraphClient,
) -> None:
    host = await start_ts_host(node_package, service, nats_server)
    hosts = [host]
    try:
        thread = await sdk.threads.create()
        tid = thread["thread_id"]
        run = await sdk.runs.create(tid, "ts_chat", input=question("hold"))
        # The first attempt's reply node holds: kill its Node.js process there.
        await host.wait_line(lambda _l: _l == f"holding {run['run_id']}", PATIENCE)
        os.kill(runner_pid(host, "ts_chat"), signal.SIGKILL)
        await host.wait_exit(PATIENCE)  # the host ends with its runner
        hosts.append(await start_ts_host(node_package, service, nats_server))

        parts = [
            p
            async for p in sdk.runs.join_stream(
                tid, run["run_id"], stream_mode=["values", "updates"]
            )
        ]
        assert [next(iter(p.data)) for p in parts if p.event == "updates"] == ["reply"]
        state = await sdk.threads.get_state(tid)
        assert conversation(state["values"]) == [("human", "hold"), ("ai", "you said hold")]
        assert (await sdk.runs.get(tid, run["run_id"]))["status"] == "success"
    finally:
        for each in hosts:
            await each.close()


async def test_a_runner_started_by_the_host_ends_when_the_hosts_pipe_closes(
    node_package: Path, service: TurnkeeperServer, nats_server: NatsServer
) -> None:
    """The lifeline: a host ended by SIGKILL leaves no runner serving on, because the
    pipe on the runner's stdin closes with it."""
    runner = await asyncio.create_subprocess_exec(
        "node",
        str(node_package / "dist" / "cli" / "graph.js"),
        str(PROJECT.parent / "src" / "agent.ts") + ":chat",
        env={
            **os.environ,
            "TURNKEEPER_ADDRESS": service.address,
            "TURNKEEPER_NATS_URL": nats_server.url,
            "TURNKEEPER_AGENT": "ts_chat",
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            "TURNKEEPER_STDIN_LIFELINE": "1",
        },
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert runner.stdout is not None and runner.stdin is not None
        line = await asyncio.wait_for(runner.stdout.readline(), PATIENCE)
        assert line.startswith(b"ready "), line
        runner.stdin.close()
        assert await asyncio.wait_for(runner.wait(), PATIENCE) == 0
    finally:
        if runner.returncode is None:
            runner.kill()
            await runner.wait()
