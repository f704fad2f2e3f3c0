"""A langgraph.json's LangGraph.js graphs (a ``.ts``, ``.mts``, ``.js`` ... file),
each served by the TypeScript runner's ``turnkeeper-graph`` in a Node.js process of
its own, beside the Python graphs' bridges (as ``langgraph dev`` hosts both
languages). The runner answers the same ``langgraph/*`` methods and runs as a
bridge does, so the service's LangGraph API serves either the same way.

Which runner: ``TURNKEEPER_NODE_RUNNER`` (the path of ``turnkeeper-graph``'s
``graph.js``) when set; else ``@turnkeeper/client`` installed in the project (its
``node_modules``, looked up from the langgraph.json's folder upwards); else the
package of this clone (``clients/node``, built with ``npm run build``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Final

from turnkeeper.agent.bridge import BridgeConfig
from turnkeeper.agent.host._config import GraphSpec, HostConfig

log = logging.getLogger(__name__)

RUNNER_VARIABLE: Final = "TURNKEEPER_NODE_RUNNER"
_IN_PACKAGE: Final = Path("dist") / "cli" / "graph.js"
#: clients/node of the clone this package is installed from (an editable install).
_CLONE: Final = Path(__file__).resolve().parents[4] / "node"


def node_runner(config: HostConfig, env: Mapping[str, str]) -> tuple[str, Path]:
    """``node`` and the runner's ``graph.js``; ValueError saying how to get them."""
    node = shutil.which("node", path=env.get("PATH"))
    if node is None:
        raise ValueError(
            f"{config.path}: its graphs include LangGraph.js files, which need Node.js "
            "(20 or newer) on PATH"
        )
    given = env.get(RUNNER_VARIABLE)
    if given:
        path = Path(given)
        if not path.is_file():
            raise ValueError(f"{RUNNER_VARIABLE}={given}: no such file")
        return node, path
    for folder in (config.path.parent, *config.path.parent.parents):
        installed = folder / "node_modules" / "@turnkeeper" / "client" / _IN_PACKAGE
        if installed.is_file():
            return node, installed
    if (_CLONE / _IN_PACKAGE).is_file():
        return node, _CLONE / _IN_PACKAGE
    raise ValueError(
        f"{config.path}: its graphs include LangGraph.js files, served by the "
        "TypeScript runner: install it in the project (npm install @turnkeeper/client), "
        f"or name its dist/cli/graph.js in {RUNNER_VARIABLE}"
    )


def runner_env(spec: GraphSpec, bridge: BridgeConfig, env: Mapping[str, str]) -> dict[str, str]:
    """The runner's variables: the host's, with what the Python bridge of the same
    graph would have worked out (its agent, NATS server, /healthz address, label)."""
    return {
        **env,
        "TURNKEEPER_AGENT": spec.name,
        "TURNKEEPER_NATS_URL": bridge.nats_url,
        "TURNKEEPER_HEALTH_LISTEN": bridge.health_listen,
        "TURNKEEPER_REPLICA": bridge.replica,
        "TURNKEEPER_VERSION_LABEL": spec.version_label or bridge.version_label,
        "TURNKEEPER_LANGGRAPH_API": "1",
        "TURNKEEPER_STDIN_LIFELINE": "1",
    }


class NodeGraph:
    """One LangGraph.js graph served by a Node.js runner process."""

    def __init__(
        self, spec: GraphSpec, node: str, runner: Path, env: Mapping[str, str], cwd: Path
    ) -> None:
        self.spec = spec
        self.node = node
        self.runner = runner
        self.env = dict(env)
        self.cwd = cwd
        self.process: asyncio.subprocess.Process | None = None
        self._started = asyncio.Event()

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            self.node,
            str(self.runner),
            f"{self.spec.module}:{self.spec.attribute}",
            cwd=self.cwd,
            env=self.env,
            # A lifeline: the runner ends when this pipe closes, so a host ended by
            # SIGKILL leaves no runner serving on (TURNKEEPER_STDIN_LIFELINE).
            stdin=asyncio.subprocess.PIPE,
        )
        self._started.set()
        log.info(
            "graph %s: served by the Node.js runner (pid %d) from %s:%s",
            self.spec.name,
            self.process.pid,
            self.spec.module,
            self.spec.attribute,
        )

    async def wait_closed(self) -> int:
        """The runner's exit status, once it ends (the host then ends too)."""
        await self._started.wait()
        assert self.process is not None
        code = await self.process.wait()
        log.info("graph %s: the Node.js runner ended with status %d", self.spec.name, code)
        return code

    async def shutdown(self, grace: float) -> None:
        """SIGTERM (the runner's own drain), then SIGKILL after `grace` seconds."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()


def node_graphs(
    config: HostConfig, specs: list[tuple[GraphSpec, BridgeConfig]], env: Mapping[str, str]
) -> list[NodeGraph]:
    """A runner for each LangGraph.js graph (none: no Node.js needed)."""
    if not specs:
        return []
    node, runner = node_runner(config, env)
    cwd = config.path.parent
    base = {**os.environ, **env}
    return [NodeGraph(s, node, runner, runner_env(s, b, base), cwd) for s, b in specs]
