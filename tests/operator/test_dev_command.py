"""`turnkeeper agent` and `turnkeeper dev` as a newcomer meets them (issue 49): they
stop when told, whatever they are waiting for, and two agents started with defaults
on one machine both come up."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from turnkeeper import _local_services as local_services
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import PATIENCE, Agent
from tests.support.nats import NatsServer
from tests.support.procs import ServiceProcess, kill_group, spawn_child

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart"
# What the issue asks of a process told to stop: gone within this.
STOP_WITHIN = 5.0


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port nothing listens on (bound, never listening, so nobody else gets it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A copy of the quick start's project, so its .turnkeeper/ goes to tmp."""
    copy = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART, copy, ignore=shutil.ignore_patterns(".turnkeeper"))
    return copy / "langgraph.json"


def env_of(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "NATS_"))}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


@pytest.fixture
async def processes() -> AsyncIterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for process in started:
        kill_group(process.proc.pid)
        for line in process.lines:
            # dev's graphs live in a process group of their own.
            if line.startswith("turnkeeper dev: graphs hosted by pid "):
                kill_group(int(line.rsplit(" ", 1)[1]))
        await process.close()


async def turnkeeper(processes: list[Agent], *args: str, env: dict[str, str]) -> Agent:
    child = await spawn_child(
        sys.executable,
        "-m",
        "turnkeeper.operator",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    process = Agent(child, args[0])
    processes.append(process)
    return process


async def stops_within(process: Agent, seconds: float, sig: int = signal.SIGTERM) -> int:
    process.signal(signal.Signals(sig))
    try:
        return await asyncio.wait_for(process.wait_exited(), seconds)
    except TimeoutError:
        raise AssertionError(
            f"{process.name} still running {seconds} s after {signal.Signals(sig).name}:\n"
            + process.output()
        ) from None


def waits_for_healthz(line: str) -> bool:
    return "startup Redrive waits for /healthz 200" in line


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["sigterm", "sigint"])
async def test_agent_stops_while_the_service_and_nats_are_unreachable(
    processes: list[Agent], project: Path, closed_port: int, sig: int
) -> None:
    env = env_of(
        TURNKEEPER_ADDRESS=f"127.0.0.1:{closed_port}",
        NATS_URL=f"nats://127.0.0.1:{closed_port}",
        TURNKEEPER_HEALTH_LISTEN="127.0.0.1:0",
    )
    agent = await turnkeeper(processes, "agent", str(project), env=env)
    await agent.wait_line(waits_for_healthz)
    assert await stops_within(agent, STOP_WITHIN, sig) in (0, 130)


async def test_agent_stops_while_nats_is_unreachable(
    processes: list[Agent], project: Path, closed_port: int, service: TurnkeeperServer
) -> None:
    env = env_of(
        TURNKEEPER_ADDRESS=service.address,
        NATS_URL=f"nats://127.0.0.1:{closed_port}",
        TURNKEEPER_HEALTH_LISTEN="127.0.0.1:0",
    )
    agent = await turnkeeper(processes, "agent", str(project), env=env)
    await agent.wait_line(lambda line: waits_for_healthz(line) and "NATS" in line)
    assert await stops_within(agent, STOP_WITHIN) == 0


async def test_dev_stops_while_nats_is_unreachable(
    processes: list[Agent], project: Path, closed_port: int, tmp_path: Path
) -> None:
    args = ("--port", "0", "--nats-url", f"nats://127.0.0.1:{closed_port}")
    dev = await turnkeeper(processes, "dev", str(project), *args, env=env_of())
    await dev.wait_line(waits_for_healthz)
    assert await stops_within(dev, STOP_WITHIN) == 0
    # The graphs' process went with it.
    line = next(x for x in dev.lines if x.startswith("turnkeeper dev: graphs hosted by pid "))
    with pytest.raises(ProcessLookupError):
        os.kill(int(line.rsplit(" ", 1)[1]), 0)


@pytest.mark.parametrize(
    "moment",
    ["turnkeeper dev: LangGraph API on ", "turnkeeper dev: graphs hosted by pid "],
    ids=["service-up", "graphs-starting"],
)
async def test_dev_stops_at_any_point_of_its_start(
    processes: list[Agent], project: Path, moment: str
) -> None:
    dev = await turnkeeper(processes, "dev", str(project), "--port", "0", env=env_of())
    await dev.wait_line(lambda line: line.startswith(moment))
    assert await stops_within(dev, STOP_WITHIN, signal.SIGINT) == 0
    assert not any("Traceback" in line for line in dev.lines), dev.output()


async def test_two_agents_with_default_health_ports_both_come_up(
    processes: list[Agent],
    project: Path,
    service: TurnkeeperServer,
    nats_server: NatsServer,
) -> None:
    """Neither sets TURNKEEPER_HEALTH_LISTEN: the second finds 8080 taken (by the
    first, or by anyone) and takes a free port, saying which."""
    urls = []
    for replica in ("one", "two"):
        env = env_of(
            TURNKEEPER_ADDRESS=service.address,
            NATS_URL=nats_server.url,
            TURNKEEPER_REPLICA=replica,
        )
        agent = await turnkeeper(processes, "agent", str(project), env=env)
        await agent.wait_line(lambda line: "startup Redrive:" in line, PATIENCE * 4)
        line = await agent.wait_line(lambda line: "/healthz on http://" in line)
        urls.append(line.rsplit(" ", 1)[1])
    assert urls[0] != urls[1]
    assert "is in use (another agent?)" in processes[1].output()


async def test_an_explicit_health_address_in_use_names_the_variable(
    processes: list[Agent], project: Path, closed_port: int
) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        env = env_of(
            TURNKEEPER_ADDRESS=f"127.0.0.1:{closed_port}",
            NATS_URL=f"nats://127.0.0.1:{closed_port}",
            TURNKEEPER_HEALTH_LISTEN=f"127.0.0.1:{port}",
        )
        agent = await turnkeeper(processes, "agent", str(project), env=env)
        assert await agent.wait_exit(PATIENCE) == 2
    assert f"/healthz cannot listen on 127.0.0.1:{port}: the port is in use" in agent.output()
    assert "TURNKEEPER_HEALTH_LISTEN" in agent.output()
    assert "Traceback" not in agent.output()


async def test_an_agent_finds_the_nats_of_the_service_on_this_machine(
    processes: list[Agent], project: Path, tmp_path: Path
) -> None:
    """`turnkeeper serve` with its bundled NATS on a random port, and an agent told
    only where the service is: it comes up on that NATS (decision 306)."""
    (tmp_path / "data").mkdir()
    served = ServiceProcess(tmp_path / "data", bundled_nats=True, extra=["--http-port", "-1"])
    address = await asyncio.to_thread(served.start)
    try:
        nats_url = served.wait_line(re.compile(r"bundled nats-server at (\S+)")).group(1)
        await asyncio.to_thread(served.wait_line, re.compile("NATS URL published"))
        env = env_of(TURNKEEPER_ADDRESS=address, TURNKEEPER_HEALTH_LISTEN="127.0.0.1:0")
        agent = await turnkeeper(processes, "agent", str(project), env=env)
        await agent.wait_line(lambda line: "startup Redrive:" in line, PATIENCE * 4)
        said = f"NATS at {nats_url}: where the turnkeeper service at {address} says its NATS is"
        assert said in agent.output()
        assert local_services.nats_url_for(address) == nats_url
    finally:
        assert await asyncio.to_thread(served.terminate) == 0
    # Withdrawn when the service stops: a later agent keeps its default.
    assert local_services.nats_url_for(address) is None


def graphs_pid(dev: Agent) -> int:
    line = next(x for x in dev.lines if x.startswith("turnkeeper dev: graphs hosted by pid "))
    return int(line.rsplit(" ", 1)[1])


async def dev_with_frozen_graphs(processes: list[Agent], project: Path, timeout: str) -> Agent:
    """dev, told to stop, whose graphs' process is frozen (SIGSTOP): its stop waits
    for them (DEV_GRACE and 3 s) unless something bounds it."""
    dev = await turnkeeper(
        processes,
        *("dev", str(project), "--port", "0", "--shutdown-timeout", timeout),
        env=env_of(),
    )
    await dev.wait_line(lambda line: line.startswith("turnkeeper dev: graphs hosted by pid "))
    pid = graphs_pid(dev)
    os.killpg(pid, signal.SIGSTOP)
    # Stopped once the kernel delivers it: a SIGTERM pending beside it would be
    # delivered first (lower number) and end the process instead.
    await asyncio.wait_for(asyncio.to_thread(stopped, pid), PATIENCE)
    return dev


def stopped(pid: int) -> None:
    """Until process `pid` is stopped (its /proc state T); no event says so."""
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "T":
        time.sleep(0.01)


async def test_dev_exits_at_its_shutdown_deadline_whatever_hangs(
    processes: list[Agent], project: Path
) -> None:
    """Decision 319's watchdog, in dev: a stop past --shutdown-timeout ends the process."""
    dev = await dev_with_frozen_graphs(processes, project, "1s")
    assert await stops_within(dev, 1 + STOP_WITHIN / 2) == 1, dev.output()
    assert "shutdown did not finish within 1 s (--shutdown-timeout)" in dev.output()


async def test_a_second_signal_stops_dev_at_once(processes: list[Agent], project: Path) -> None:
    dev = await dev_with_frozen_graphs(processes, project, "10m")
    dev.signal(signal.SIGTERM)
    await dev.wait_line(lambda line: "(a second signal stops at once)" in line)
    # Ended by the signal itself, not by a finished stop (which waits for the graphs).
    assert await stops_within(dev, STOP_WITHIN / 2) == -signal.SIGTERM


def nth(predicate: Callable[[str], bool], n: int) -> Callable[[str], bool]:
    """True on the n-th line that satisfies `predicate` (Agent.wait_line asks each line
    once, in order)."""
    seen = [0]

    def check(line: str) -> bool:
        if predicate(line):
            seen[0] += 1
        return seen[0] >= n

    return check


async def test_dev_reloads_the_graphs_when_a_file_changes(
    processes: list[Agent], project: Path
) -> None:
    dev = await turnkeeper(processes, "dev", str(project), "--port", "0", env=env_of())
    await dev.wait_line(lambda line: line == "turnkeeper dev: ready (Ctrl-C stops it)", 240)
    url = next(x.rsplit(" ", 1)[1] for x in dev.lines if "LangGraph API on http://" in x)
    graph = project.parent / "graph.py"
    original = graph.read_text()

    # A graph that does not load: dev says so and waits for the next change.
    graph.write_text(original + "\nthis is not python\n")
    await dev.wait_line(lambda line: "graph.py changed: reloading the graphs" in line)
    await dev.wait_line(lambda line: "dev loads them again when a file" in line)
    graph.write_text(original.replace("A durable answer", "A reloaded answer"))
    # The second process that serves (the broken graph's never did).
    await dev.wait_line(nth(lambda line: "startup Redrive:" in line, 2))

    client = get_client(url=url)
    try:
        question: Any = {"messages": [{"role": "user", "content": "reloaded?"}]}
        final = await client.runs.wait(None, "chat", input=question)
    finally:
        await client.http.client.aclose()
    assert isinstance(final, dict)
    assert "A reloaded answer" in final["messages"][-1]["content"]
    assert dev.proc.returncode is None


async def test_dev_on_a_taken_port_says_so(processes: list[Agent], project: Path) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        dev = await turnkeeper(processes, "dev", str(project), "--port", str(port), env=env_of())
        assert await dev.wait_exit(PATIENCE * 2) == 2
    assert f"port {port} is in use: pass another --port, or --port 0 for any free one" in (
        dev.output()
    )
    assert "Traceback" not in dev.output()


async def test_dev_without_a_langgraph_json_says_where_it_looked(tmp_path: Path) -> None:
    child = await spawn_child(
        sys.executable,
        *("-m", "turnkeeper.operator", "dev"),
        cwd=str(tmp_path),
        env=env_of(),
        stdin=asyncio.subprocess.DEVNULL,
    )
    dev = Agent(child, "dev")
    assert await dev.wait_exit(PATIENCE * 2) == 2
    assert f"{tmp_path}/langgraph.json: no such file" in dev.output()
    assert "turnkeeper dev path/to/langgraph.json" in dev.output()


async def exited(pid: int) -> None:
    """Until process `pid` (not our child) has exited: its pidfd turns readable."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    gone = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(fd, gone.set)
    try:
        await gone.wait()
    finally:
        loop.remove_reader(fd)
        os.close(fd)


async def test_the_graphs_end_with_dev_even_when_dev_is_killed(
    processes: list[Agent], project: Path
) -> None:
    dev = await turnkeeper(processes, "dev", str(project), "--port", "0", env=env_of())
    await dev.wait_line(lambda line: line == "turnkeeper dev: ready (Ctrl-C stops it)", 240)
    line = next(x for x in dev.lines if x.startswith("turnkeeper dev: graphs hosted by pid "))
    host = int(line.rsplit(" ", 1)[1])
    dev.signal(signal.SIGKILL)
    await asyncio.wait_for(exited(host), STOP_WITHIN * 2)


async def test_dev_hosts_a_typescript_project(
    processes: list[Agent], tmp_path: Path, built_node_package: Path
) -> None:
    """`turnkeeper dev` on a langgraph.json of LangGraph.js graphs: each is served by
    the TypeScript runner, an assistant of the LangGraph API like a Python graph."""
    project = tmp_path / "ts_project"
    shutil.copytree(REPO / "tests" / "langgraph_api" / "ts_project", project)
    runner = built_node_package / "dist" / "cli" / "graph.js"
    env = env_of(TURNKEEPER_NODE_RUNNER=str(runner))
    dev = await turnkeeper(
        processes, "dev", str(project / "langgraph.json"), "--port", "0", env=env
    )
    await dev.wait_line(lambda line: line == "turnkeeper dev: ready (Ctrl-C stops it)", 240)
    await dev.wait_line(nth(lambda line: line.startswith("ready "), 2), PATIENCE)
    url = next(x.rsplit(" ", 1)[1] for x in dev.lines if "LangGraph API on http://" in x)
    client = get_client(url=url)
    try:
        graphs = {a["graph_id"] for a in await client.assistants.search()}
        assert graphs >= {"ts_chat", "ts_approval"}
        thread = await client.threads.create()
        paused: Any = await client.runs.wait(
            thread["thread_id"], "ts_approval", input={"topic": "tea"}
        )
    finally:
        await client.http.client.aclose()
    assert paused["__interrupt__"][0]["value"] == {"question": "approve a note on tea?"}
    assert await stops_within(dev, STOP_WITHIN + 5) == 0
