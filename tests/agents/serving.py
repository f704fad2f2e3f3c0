"""What a test agent process does around its bridge (tests/agents/*.py,
tests/faults/agent.py): wait for `go` when started warm, serve until SIGTERM while
saying ``ready <healthz url>`` once it serves, and log to stderr. The lines are the
ones tests/support/agents.py's Agent awaits (`go`, `ready`).

tests/agents/job_agent.py says the same lines with its own copy: it runs as a script
(tests/support/agents.py's AGENT_SCRIPT), without the repository on its path."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from turnkeeper.agent.bridge import Bridge


async def wait_for_go() -> None:
    """With WAIT_FOR_GO=1: everything imported, say ``imported`` and wait for a line
    on stdin (a warm replacement, started before the agent it replaces dies)."""
    if os.environ.get("WAIT_FOR_GO") == "1":
        print("imported", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


async def serve(bridge: Bridge) -> None:
    """Run `bridge` until SIGTERM, saying ``ready <healthz url>`` once it has
    subscribed."""

    async def announce() -> None:
        await bridge.wait_subscribed()
        print(f"ready {bridge.health_url}", flush=True)

    announcing = asyncio.create_task(announce())
    await bridge.run()  # until SIGTERM
    announcing.cancel()


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """The process: `main` with INFO logs on stderr (the test reads them on failure)."""
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    asyncio.run(main())
