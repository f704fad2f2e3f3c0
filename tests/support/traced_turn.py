"""One turn with OpenTelemetry on, in a process of its own (a tracer provider is
process-global, so the test suite's own process stays untraced).

    python -m tests.support.traced_turn WORKDIR [DATABASE_URL]

Runs a real nats-server, the service, a bridge with a two-step graph and a panel's
session transport, all with the SDK's in-memory exporter installed; a root span
"panel" sends responses/create, and the turn runs to its end. Prints every
finished span as one JSON line: name, kind, trace id, span id, parent span id; and
the headers of each event message the outbox mirrored to NATS.
"""

from __future__ import annotations

import asyncio
import json
import operator
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import nats
from google.protobuf import json_format, struct_pb2
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from nats.aio.msg import Msg
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from turnkeeper.agent.bridge import Bridge
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import create_server
from turnkeeper_server.config import Settings
from turnkeeper_server.messaging.embedded import EmbeddedNats

from tests.support.bridges import bridge_config

AGENT = "traced"


class State(TypedDict):
    question: str
    results: Annotated[list[str], operator.add]


def second(state: State) -> dict[str, Any]:
    # The "approve" question parks the turn until a ResumeDetached answers it.
    if state["question"] == "approve":
        return {"results": [f"approved: {interrupt('ok?')}"]}
    return {"results": ["second"]}


def graph() -> StateGraph[Any, Any, Any, Any]:
    builder = StateGraph(State)
    builder.add_node("first", lambda s: {"results": [f"first: {s['question']}"]})
    builder.add_node("second", second)
    builder.add_edge(START, "first")
    builder.add_edge("first", "second")
    builder.add_edge("second", END)
    return builder


async def until_event(client: AsyncTurnkeeperClient, turn_id: str, type_: str) -> None:
    async for frame in client.watch_turn(turns_pb2.WatchTurnRequest(turn_id=turn_id)):
        if frame.event.type == type_:
            return
    raise AssertionError(f"turn {turn_id} ended without a {type_} event")


def json_value(obj: Any) -> struct_pb2.Value:
    value = struct_pb2.Value()
    json_format.Parse(json.dumps(obj), value)
    return value


async def main(workdir: Path, database_url: str | None) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    bus = EmbeddedNats()
    url = bus.start()
    service = await create_server(
        Settings(
            turns_path=workdir / "turns.db",
            sessions_path=workdir / "sessions.db",
            # PostgreSQL instead of the SQLite files when given.
            database_url=database_url,
            listen="127.0.0.1:0",
            nats_url=url,
        )
    )
    config = bridge_config(AGENT, service.address, url, "r1")
    nc = await nats.connect(url)
    mirrored: list[dict[str, str]] = []

    async def mirror(msg: Msg) -> None:
        mirrored.append(dict(msg.headers or {}))

    await nc.subscribe("vystak.turn.events.turn-1", cb=mirror)
    panel = AsyncTurnkeeperClient(ConnectionOptions(target=service.address))
    try:
        async with Bridge(graph(), config) as bridge:
            await bridge.wait_subscribed()
            transport = NatsAgentTransport(nc, AGENT, client=panel)
            with trace.get_tracer("panel").start_as_current_span("panel"):
                created = await transport.create(
                    input={"question": "q", "results": []}, thread_id="th-1", turn_id="turn-1"
                )
            assert created.turn_id == "turn-1", created
            # Outside the root span: the follow is the test's, not the turn's.
            with trace.use_span(trace.INVALID_SPAN):
                request = turns_pb2.WatchTurnRequest(turn_id="turn-1")
                async for frame in panel.watch_turn(request):
                    if frame.event.type.startswith("turn."):
                        break
            # A parked turn, answered by an operator: the service hands it to the bridge
            # (turnkeeper/execute over NATS) inside the operator's trace.
            await transport.create(
                input={"question": "approve", "results": []}, thread_id="th-2", turn_id="turn-2"
            )
            with trace.use_span(trace.INVALID_SPAN):
                await until_event(panel, "turn-2", "interrupt")
            with trace.get_tracer("operator").start_as_current_span("operator"):
                await panel.resume_detached(
                    turns_pb2.ResumeDetachedRequest(turn_id="turn-2", resume=json_value("yes"))
                )
            with trace.use_span(trace.INVALID_SPAN):
                await until_event(panel, "turn-2", "turn.done")
            # Every event up to turn.done went out through the outbox.
            await service.outbox.flush(timeout=10)
            await nc.flush()
    finally:
        await panel.close()
        await nc.close()
        await service.stop(0)
        bus.stop()
    for headers in mirrored:
        print(json.dumps({"mirrored": headers}))
    for span in exporter.get_finished_spans():
        context = span.get_span_context()
        assert context is not None
        print(
            json.dumps(
                {
                    "name": span.name,
                    "kind": span.kind.name,
                    "trace_id": format(context.trace_id, "032x"),
                    "span_id": format(context.span_id, "016x"),
                    "parent": format(span.parent.span_id, "016x") if span.parent else None,
                }
            )
        )


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else None))
