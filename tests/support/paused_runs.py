"""Runs that stay running until they are cancelled: the context graph
(tests/langgraph_api/graphs/context.py) hosted with its `pause` step outlasting any
test, an SDK client on the service's LangGraph API, and the wait until a run is in
that step (each read waits on the service's answer, none on a clock)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import PATIENCE
from tests.support.langgraph_host import hosted
from tests.support.nats import NatsServer

CONTEXT = Path(__file__).resolve().parents[1] / "langgraph_api" / "graphs" / "context.json"
GRAPH = "context"


@contextlib.asynccontextmanager
async def paused_runs(
    service: TurnkeeperServer, nats: NatsServer, api_url: str, *, replica: str
) -> AsyncIterator[LangGraphClient]:
    """The context graph hosted with `pause` taking 600 s, and an SDK on `api_url`."""
    async with (
        hosted(CONTEXT, service, nats, replica=replica, extra_env={"CONTEXT_STEP_DELAY": "600"}),
        get_client(url=api_url) as sdk,
    ):
        yield sdk


async def until_paused(sdk: LangGraphClient, thread_id: str, run_id: str) -> None:
    """Until the run is in `pause` (its `before` step streamed)."""
    async with asyncio.timeout(PATIENCE):
        async for part in sdk.runs.join_stream(thread_id, run_id, stream_mode="updates"):
            if part.event == "updates" and "before" in (part.data or {}):
                return
    raise AssertionError(f"run {run_id} ended before its pause")
