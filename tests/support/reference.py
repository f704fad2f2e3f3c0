"""`langgraph dev`, the reference server the LangGraph API is compared with: where its
virtualenv is (bench/langgraph-dev.txt, decision 217; .ci/run makes it), what a test
does without it, and one started on a project for a test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.agents import Agent
from tests.support.procs import spawn_child

LANGGRAPH = Path(
    os.environ.get("TURNKEEPER_BENCH_LANGGRAPH")
    or Path.home() / ".cache" / "turnkeeper-bench" / "langgraph-dev" / "bin" / "langgraph"
)
# Without analytics or tracing: it runs offline here.
ENV = {"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false"}


def require_reference() -> None:
    """Skip without `langgraph dev`, or fail where CI made it and requires it."""
    if LANGGRAPH.exists():
        return
    missing = f"no `langgraph dev` at {LANGGRAPH}: make it from bench/langgraph-dev.txt"
    if os.environ.get("TURNKEEPER_REQUIRE_REFERENCE") == "1":
        pytest.fail(missing + " (.ci/run makes it and requires it)")
    pytest.skip(reason=missing)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(config: Path, port: int) -> list[str]:
    """`langgraph dev` serving `config` on `port`, offline, without reload."""
    return [
        str(LANGGRAPH),
        "dev",
        "--config",
        str(config),
        "--port",
        str(port),
        "--no-browser",
        "--no-reload",
    ]


@contextlib.asynccontextmanager
async def langgraph_dev(app: Path) -> AsyncIterator[str]:
    """`langgraph dev` serving `app`/langgraph.json (a copy the test made: it writes
    its in-memory state's flushes beside the config); yields its URL once it has
    started, and stops it after."""
    require_reference()
    port = free_port()
    proc = await spawn_child(
        *command(app / "langgraph.json", port),
        cwd=app,
        stdin=asyncio.subprocess.DEVNULL,
        env={**os.environ, **ENV},
    )
    server = Agent(proc, "langgraph-dev")
    try:
        await server.wait_line(lambda line: "Application started up" in line)
        # It moves to another port when the one asked for was taken meanwhile.
        moved = re.search(r"using port (\d+) instead", "\n".join(server.lines))
        yield f"http://127.0.0.1:{moved.group(1) if moved else port}"
    finally:
        await server.close()
