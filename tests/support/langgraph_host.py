"""`turnkeeper agent langgraph.json` as a real subprocess: the graphs of a
langgraph.json hosted durably, for the LangGraph API tests."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.support.agents import Agent
from tests.support.procs import spawn_child

REPO = Path(__file__).resolve().parents[2]
THREADPLANE = REPO / "examples" / "threadplane" / "langgraph.json"


async def spawn_host(
    config: Path,
    *,
    service: str,
    nats_url: str,
    replica: str,
    token: str | None = None,
    step_delay: float | None = None,
    extra_env: dict[str, str] | None = None,
) -> Agent:
    """Start the host; `await agent.wait_line(startup_done)` before using it.
    `step_delay`: seconds each node of the example graphs takes (a window mid-step)."""
    if step_delay is not None:
        extra_env = {**(extra_env or {}), "THREADPLANE_STEP_DELAY": str(step_delay)}
    env = {
        **os.environ,
        "TURNKEEPER_ADDRESS": service,
        "NATS_URL": nats_url,
        "TURNKEEPER_REPLICA": replica,
        "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
        "PYTHONUNBUFFERED": "1",
        **(extra_env or {}),
    }
    env.pop("TURNKEEPER_TOKEN", None)
    if token is not None:
        env["TURNKEEPER_TOKEN"] = token
    child = await spawn_child(
        sys.executable,
        "-m",
        "turnkeeper.agent.host",
        str(config),
        stdin=asyncio.subprocess.DEVNULL,
        env=env,
    )
    return Agent(child, replica)


def startup_done(line: str) -> bool:
    """The bridge's startup Redrive is done: it serves, and took its orphans back."""
    return "startup Redrive:" in line


async def start_host(config: Path = THREADPLANE, **kwargs: object) -> Agent:
    agent = await spawn_host(config, **kwargs)  # type: ignore[arg-type]
    await agent.wait_line(startup_done)
    return agent
