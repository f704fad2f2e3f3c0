"""The Node.js package (clients/node) for tests: a copy with its locked dependencies
installed (`npm ci`) and built (`npm run build`), and its test agent
(clients/node/testing/agent.mjs) as a real subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import platform
import shutil
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.panel.follower import Event, FollowOptions, Frame, Transcript, TurnFollower

from tests.support.agents import Agent, result
from tests.support.npm_cache import cached_output, link_node_modules
from tests.support.procs import spawn_child

REPO = Path(__file__).resolve().parent.parent.parent
NPM = shutil.which("npm")
NODE = shutil.which("node")

# grpc clients honour http_proxy-style variables; the services under test are on
# loopback and must never be reached through a proxy.
NO_PROXY_ENV = {"no_grpc_proxy": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


def npm_run(args: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    assert NPM is not None
    result = subprocess.run(
        [NPM, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **NO_PROXY_ENV},
    )
    assert result.returncode == 0, f"npm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


@functools.cache
def _tools() -> str:
    assert NODE is not None and NPM is not None
    node, npm = (
        subprocess.run([tool, "--version"], capture_output=True, text=True, check=True).stdout
        for tool in (NODE, NPM)
    )
    return f"{platform.system()} {platform.machine()} node {node.strip()} npm {npm.strip()}"


def npm_ci(package: Path) -> None:
    """`npm ci` in `package` (a copy holding its package.json and lockfile): hard links
    to an install made once per lockfile (tests/support/npm_cache.py, decision 460).
    --prefer-offline: the lockfile's packages from npm's cache where it has them
    (.ci/run's own `npm ci` filled it), so a slow registry does not decide the tests."""
    link_node_modules(
        package,
        _tools(),
        lambda scratch: npm_run(["ci", "--prefer-offline", "--no-audit", "--no-fund"], scratch),
    )


def prepare_package(root: Path) -> Path:
    """A copy of clients/node (with the protos its generator reads from ../../protos
    and the test vectors its tests read from ../../vectors) under `root`, installed
    from package-lock.json and built. A copy, so a test neither replaces a
    developer's node_modules nor races another run."""
    if NPM is None or NODE is None:
        pytest.skip(
            reason="npm is not on PATH: the Node.js package in clients/node cannot be tested"
        )
    shutil.copytree(REPO / "protos", root / "protos")
    shutil.copytree(REPO / "vectors", root / "vectors")
    package = root / "clients" / "node"
    shutil.copytree(
        REPO / "clients" / "node",
        package,
        ignore=shutil.ignore_patterns("node_modules", "dist"),
    )
    npm_ci(package)
    # Built once per tree of sources (tests/support/npm_cache.py).
    cached_output(package, _tools(), lambda built: npm_run(["run", "build"], built))
    return package


async def spawn_agent(
    package: Path,
    *,
    service: str,
    nats_url: str,
    agent: str,
    replica: str,
    side_log: Path,
    graph: str = "steps",
    hold_work: bool = False,
    step_ms: int = 0,
    extra_env: dict[str, str] | None = None,
) -> Agent:
    """clients/node/testing/agent.mjs under TurnRunner; `await agent.ready()`."""
    assert NODE is not None
    env = {
        **os.environ,
        **NO_PROXY_ENV,
        "TURNKEEPER_ADDRESS": service,
        "TURNKEEPER_NATS_URL": nats_url,
        "TURNKEEPER_AGENT": agent,
        "TURNKEEPER_REPLICA": replica,
        "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
        "AGENT_GRAPH": graph,
        "SIDE_LOG": str(side_log),
        "HOLD_WORK": "1" if hold_work else "0",
        "STEP_MS": str(step_ms),
        **(extra_env or {}),
    }
    child = await spawn_child(
        NODE,
        str(package / "testing" / "agent.mjs"),
        cwd=package,
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    return Agent(child, replica)


async def run_command(
    args: Sequence[str], cwd: Path, *, env: dict[str, str] | None = None, timeout: float = 300
) -> tuple[int, str, str]:
    """A command (node, npm) run to its end, its exit status, stdout and stderr:
    without blocking the event loop an in-process service runs on, and without a
    proxy between it and the loopback services it talks to."""
    process = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        env={**os.environ, **NO_PROXY_ENV, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    assert process.returncode is not None
    return process.returncode, stdout.decode(), stderr.decode()


@dataclass
class NodeAgents:
    """Replicas of clients/node/testing/agent.mjs (spawn_agent) against one service
    and NATS, their side effects in one log; whatever is left is closed at the end
    (`node_agents`, or tests/node/conftest.py's `js_agents`). `agent` is the agent's
    name unless a spawn names another; a spawn's keywords pass to spawn_agent and
    override these (a dead service's address, say)."""

    package: Path
    service: str
    nats_url: str
    side_log: Path
    agent: str | None = None
    spawned: list[Agent] = field(default_factory=list)

    async def spawn(self, replica: str, **kwargs: Any) -> Agent:
        """The replica's process, started: for a test that watches how it starts."""
        options: dict[str, Any] = {
            "service": self.service,
            "nats_url": self.nats_url,
            "agent": self.agent,
            "side_log": self.side_log,
            **kwargs,
        }
        assert options["agent"], "no agent named: the module's AGENT, or agent=..."
        agent = await spawn_agent(self.package, replica=replica, **options)
        self.spawned.append(agent)
        return agent

    async def start(self, replica: str, **kwargs: Any) -> Agent:
        """The replica, once it announces it is ready (its runner serves)."""
        agent = await self.spawn(replica, **kwargs)
        await agent.ready()
        return agent

    async def close(self) -> None:
        await asyncio.gather(*(a.close() for a in self.spawned), return_exceptions=True)


@contextlib.asynccontextmanager
async def node_agents(
    package: Path, service: str, nats_url: str, side_log: Path, agent: str | None = None
) -> AsyncIterator[NodeAgents]:
    agents = NodeAgents(package, service, nats_url, side_log, agent)
    try:
        yield agents
    finally:
        await agents.close()


class Watcher:
    """A Python TurnFollower's frames applied to a Transcript, as a panel shows them."""

    def __init__(self, client: AsyncTurnkeeperClient, turn_id: str) -> None:
        self.follower = TurnFollower(client, turn_id, FollowOptions(idle_gap=2.0))
        self.frames: list[Frame] = []
        self.transcript = Transcript()
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for frame in self.follower:
            self.frames.append(frame)
            self.transcript.apply(frame)
            self._changed.set()
        self._changed.set()

    async def until_event(self, type_: str, node: str, text: str | None = None) -> None:
        """Until the turn has an event of that type from that node (with that `text`
        in its data, when given)."""

        def seen(e: Event) -> bool:
            data = e.data or {}
            return (
                e.type == type_
                and data.get("node") == node
                and (text is None or data.get("text") == text)
            )

        await self.until(seen)

    async def until(self, predicate: Callable[[Event], bool]) -> None:
        async def loop() -> None:
            while not any(predicate(e) for e in self.transcript.events):
                if self.task.done():
                    raise AssertionError(f"the follower ended first: {self.frames}")
                self._changed.clear()
                await self._changed.wait()

        # No deadline: it fails at once if the follower ends first, and is otherwise
        # bounded by the test's timeout.
        await loop()

    async def finished(self) -> Transcript:
        await self.task
        return self.transcript

    async def close(self) -> None:
        await self.follower.aclose()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def hold_turn(
    nc: Any, client: AsyncTurnkeeperClient, turn_id: str, *, agent: str, **request: Any
) -> Watcher:
    """Start a background turn on an agent spawned with `hold_work` and return a
    Watcher once the turn's `work` node has emitted its token: the node is running
    and holds there."""
    await result(
        nc,
        "responses/create",
        {"input": "report", "turn_id": turn_id, "background": True, **request},
        agent=agent,
    )
    watcher = Watcher(client, turn_id)
    try:
        await watcher.until_event("token", "work")
    except BaseException:
        await watcher.close()
        raise
    return watcher
