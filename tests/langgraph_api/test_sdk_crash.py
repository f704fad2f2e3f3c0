"""The agent running a streamed run is SIGKILLed mid-step; a new replica re-drives
the run from its last checkpoint. Through LangGraph's Python SDK, unchanged: the
stream opened before the crash, one joined during it and one joined after it
(resumed with Last-Event-ID) each show every step's output exactly once, and the
thread's final state is an uninterrupted run's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.schema import StreamPart
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import PATIENCE
from tests.support.langgraph_host import THREADPLANE, hosts_for
from tests.support.nats import NatsServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300), pytest.mark.both_backends]

ASSISTANT = "durable-execution"
MODES: Any = ["values", "updates", "messages-tuple"]
STEPS = ["analyze", "plan", "generate"]


@pytest.fixture
async def slow_sdk(service: TurnkeeperServer) -> AsyncIterator[LangGraphClient]:
    assert service.web is not None
    client = get_client(url=service.web.url.rstrip("/"))
    try:
        yield client
    finally:
        await client.http.client.aclose()


def question(text: str) -> Any:
    return {"messages": [{"role": "user", "content": text, "id": "q-1"}]}


def check_stream(parts: list[StreamPart]) -> dict[str, Any]:
    """Each step's update once, in order; ids never repeat; returns the last state."""
    updates = [next(iter(p.data)) for p in parts if p.event == "updates"]
    assert updates == STEPS, updates
    ids = [int(p.id) for p in parts if p.id]
    assert ids == sorted(ids), "a part came twice or out of order"
    values = [p.data for p in parts if p.event == "values"]
    return dict(values[-1])


def comparable(state: dict[str, Any]) -> dict[str, Any]:
    """A final state without what differs from run to run (the run's id)."""
    messages = [(m["type"], m["content"]) for m in state["messages"]]
    return {
        "messages": messages,
        "step": state["step"],
        "answered": bool(state.get("completed_answer_id")),
    }


async def test_a_streamed_run_survives_a_sigkill_of_its_agent(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
    slow_sdk: LangGraphClient,
) -> None:
    async with hosts_for(
        THREADPLANE, service, nats_server, replica="lg-crash", step_delay=1.0
    ) as hosts:
        first = await hosts.start()
        # The reference: the same question, uninterrupted.
        reference = await slow_sdk.runs.wait(None, ASSISTANT, input=question("crash?"))
        thread = await slow_sdk.threads.create()
        thread_id = thread["thread_id"]
        parts: list[StreamPart] = []
        analyzed = asyncio.Event()

        async def opened_before() -> None:
            async for part in slow_sdk.runs.stream(
                thread_id, ASSISTANT, input=question("crash?"), stream_mode=MODES
            ):
                parts.append(part)
                if part.event == "updates" and "analyze" in part.data:
                    analyzed.set()

        before = asyncio.create_task(opened_before())
        await asyncio.wait_for(analyzed.wait(), PATIENCE)
        # `plan` is running (each step takes a second): kill the agent mid-step.
        await first.kill()
        run_id = parts[0].data["run_id"]

        async def joined(last_event_id: str | None = None) -> list[StreamPart]:
            return [
                p
                async for p in slow_sdk.runs.join_stream(
                    thread_id, run_id, stream_mode=MODES, last_event_id=last_event_id
                )
            ]

        during = asyncio.create_task(joined())
        await hosts.start()
        await asyncio.wait_for(before, PATIENCE)
        final = check_stream(parts)
        assert check_stream([p for p in await asyncio.wait_for(during, PATIENCE)]) == final
        after_analyze = next(p.id for p in parts if p.event == "updates" and "analyze" in p.data)
        resumed = await joined(after_analyze)
        assert [next(iter(p.data)) for p in resumed if p.event == "updates"] == STEPS[1:]

        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run_id))
        assert status.state == turns_pb2.TURN_STATE_DONE and status.attempts >= 1
        state = await slow_sdk.threads.get_state(thread_id)
        assert state["values"] == final
        assert comparable(final) == comparable(dict(reference))  # type: ignore[arg-type]
