"""Stream modes and subgraphs as LangGraph's server has them, with its own SDK over a
graph with a subgraph and a Send fan-out (graphs/nested.py): the root's `values` is
the root's state only; `checkpoints`, `tasks` and `debug` parts; `stream_subgraphs`
names a subgraph's parts by its namespace; a thread's state with its subgraph's;
the subgraphs' descriptions and the graph drawn with them (`xray`). What each part
holds was measured against `langgraph dev` with the same client."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import UnprocessableEntityError
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.records import EventRecord
from turnkeeper_server.web.langgraph.stream import Translator

from tests.support.agents import PATIENCE
from tests.support.deployment import SharedDeployments
from tests.support.langgraph_host import THREADPLANE, hosts_for
from tests.support.nats import NatsServer

# The two tests that read checkpoints (a subgraph's, by namespace) from the store run on
# both backends; the others on SQLite alone (decision 710): the stream parts, the
# graph's drawing and the schemas are the agent's and the web layer's, the same on
# either store, and a killed agent's run re-driven on PostgreSQL is
# tests/langgraph_api/test_sdk_crash.py's.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

NESTED = "nested"
THREADPLANE_GRAPH = "durable-execution"
CONFIG = Path(__file__).resolve().parent / "graphs" / "nested.json"
TOPICS: Any = {"topics": ["a", "b"]}
CHECKPOINT_KEYS = ["config", "metadata", "next", "parent_config", "tasks", "values"]
TASK_KEYS = ["id", "input", "metadata", "name", "triggers"]
RESULT_KEYS = ["error", "id", "interrupts", "name", "result"]
# The nodes that run once: the root's and the subgraph's.
NODES = ("plan", "inner", "first", "second")


@pytest.fixture
async def nested(deployments: SharedDeployments) -> AsyncIterator[LangGraphClient]:
    """The worker's shared deployment of the nested graphs (each test marked
    `shared_deployment`, on threads of its own)."""
    async with get_client(url=deployments.get(CONFIG, replica="lg-nested").url) as sdk:
        yield sdk


async def _parts(sdk: LangGraphClient, modes: Any, **kwargs: Any) -> list[tuple[str, Any]]:
    thread = await sdk.threads.create()
    kwargs.setdefault("input", TOPICS)
    stream = sdk.runs.stream(thread["thread_id"], NESTED, stream_mode=modes, **kwargs)
    return [(p.event, p.data) async for p in stream if p.event != "metadata"]


@pytest.mark.shared_deployment
async def test_values_are_the_roots_state_only(nested: LangGraphClient) -> None:
    values = [data for event, data in await _parts(nested, "values") if event == "values"]
    # As `langgraph dev` streams it: the input applied, then after each root step;
    # none of the subgraph's states (nor the empty one before the input).
    assert [len(v["log"]) for v in values] == [0, 1, 3, 8]
    assert all(v["topics"] == ["a", "b"] for v in values)


@pytest.mark.both_backends
@pytest.mark.shared_deployment
async def test_checkpoints_tasks_and_debug_parts(nested: LangGraphClient) -> None:
    checkpoints = await _parts(nested, "checkpoints")
    assert {event for event, _ in checkpoints} == {"checkpoints"}
    assert [sorted(data) for _, data in checkpoints] == [CHECKPOINT_KEYS] * 5
    assert [
        (d["metadata"]["source"], d["metadata"]["step"], d["next"]) for _, d in checkpoints
    ] == [
        ("input", -1, ["__start__"]),
        ("loop", 0, ["plan"]),
        ("loop", 1, ["work", "work"]),
        ("loop", 2, ["inner"]),
        ("loop", 3, []),
    ]
    configurable = checkpoints[-1][1]["config"]["configurable"]
    assert configurable["checkpoint_ns"] == ""
    assert not [key for key in configurable if key.startswith("__")]

    tasks = await _parts(nested, "tasks")
    shapes = [(d["name"], sorted(d)) for _, d in tasks]
    assert shapes == [
        ("plan", TASK_KEYS),
        ("plan", RESULT_KEYS),
        ("work", TASK_KEYS),
        ("work", TASK_KEYS),
        ("work", RESULT_KEYS),
        ("work", RESULT_KEYS),
        ("inner", TASK_KEYS),
        ("inner", RESULT_KEYS),
    ]
    assert sorted(
        d["input"]["topics"][0] for _, d in tasks if d["name"] == "work" and "input" in d
    ) == [
        "a",
        "b",
    ]

    debug = await _parts(nested, "debug")
    assert {event for event, _ in debug} == {"debug"}
    kinds = [d["type"] for _, d in debug]
    assert kinds.count("checkpoint") == 5
    assert kinds.count("task") == kinds.count("task_result") == 4
    first = debug[0][1]
    assert sorted(first) == ["payload", "step", "timestamp", "type"]
    assert first["step"] == -1
    # LangGraph's server adds where the checkpoint is to a debug checkpoint.
    assert sorted(first["payload"]) == sorted([*CHECKPOINT_KEYS, "checkpoint", "parent_checkpoint"])
    assert first["payload"]["checkpoint"]["checkpoint_ns"] == ""


@pytest.mark.shared_deployment
async def test_events_mode_is_astream_events_v2(nested: LangGraphClient) -> None:
    thread = await nested.threads.create()
    stream = nested.runs.stream(thread["thread_id"], NESTED, input=TOPICS, stream_mode="events")
    parts = [(p.event, p.data) async for p in stream]
    run_id = parts[0][1]["run_id"]
    events = [data for event, data in parts[1:]]
    assert {event for event, _ in parts[1:]} == {"events"}
    assert all(
        sorted(e) == ["data", "event", "metadata", "name", "parent_ids", "run_id", "tags"]
        for e in events
    )
    # As `langgraph dev` sends them: the graph's run (named after it, the run's id),
    # each node's start, stream and end, the branch, the subgraph and its nodes.
    first, last = events[0], events[-1]
    assert (first["event"], first["name"], first["run_id"]) == ("on_chain_start", NESTED, run_id)
    assert first["data"] == {"input": TOPICS}
    assert (last["event"], last["name"], last["parent_ids"]) == ("on_chain_end", NESTED, [])
    assert sorted(last["data"]) == ["output"] and len(last["data"]["output"]["log"]) == 8
    counted = Counter((e["event"], e["name"]) for e in events[1:-1])
    assert counted == Counter(
        {
            **{(f"on_chain_{kind}", n): 1 for kind in ("start", "stream", "end") for n in NODES},
            **{(f"on_chain_{kind}", "work"): 2 for kind in ("start", "stream", "end")},
            ("on_chain_start", "fan_out"): 1,
            ("on_chain_end", "fan_out"): 1,
            ("on_chain_start", "LangGraph"): 1,
            ("on_chain_end", "LangGraph"): 1,
        }
    )
    first_node = next(e for e in events if e["name"] == "first")
    assert len(first_node["parent_ids"]) == 3 and first_node["parent_ids"][0] == run_id


@pytest.mark.shared_deployment
async def test_stream_subgraphs_names_a_subgraphs_parts(nested: LangGraphClient) -> None:
    parts = await _parts(nested, ["values", "updates"], stream_subgraphs=True)
    names = [event for event, _ in parts]
    inner = [n for n in names if "|" in n]
    assert inner and all(n.split("|")[1].startswith("inner:") for n in inner)
    assert [n.split("|")[0] for n in inner] == ["values", "updates", "values", "updates", "values"]
    assert len({n.split("|")[1] for n in inner}) == 1
    assert [d for n, d in parts if n.startswith("updates|")] == [
        {"first": {"log": ["inner:first"], "note": "noted"}},
        {"second": {"log": ["inner:second"]}},
    ]
    # The root's parts are the root's alone, as without subgraphs: the subgraph's
    # node updates the root's keys only (its `note` is the subgraph's own).
    assert [d for n, d in parts if n == "updates"][-1] == {
        "inner": {"log": ["plan", "work:a", "work:b", "inner:first", "inner:second"]}
    }
    root_values = [d for n, d in parts if n == "values"]
    assert [len(v["log"]) for v in root_values] == [0, 1, 3, 8]

    plain = await _parts(nested, ["values", "updates"])
    assert all("|" not in event for event, _ in plain)


@pytest.mark.both_backends
@pytest.mark.shared_deployment
async def test_state_with_subgraphs_holds_the_subgraphs_own(nested: LangGraphClient) -> None:
    thread = await nested.threads.create()
    paused: Any = {"topics": ["a"], "pause": True}
    await nested.runs.wait(thread["thread_id"], NESTED, input=paused)
    plain: Any = await nested.threads.get_state(thread["thread_id"])
    [task] = plain["tasks"]
    assert task["name"] == "inner" and task["state"] is None
    assert task["checkpoint"]["checkpoint_ns"].startswith("inner:")

    deep: Any = await nested.threads.get_state(thread["thread_id"], subgraphs=True)
    [task] = deep["tasks"]
    assert task["checkpoint"] is None
    state = task["state"]
    assert state["values"]["log"] == ["plan", "work:a", "inner:first"]
    assert state["next"] == ["second"]
    assert state["checkpoint"]["checkpoint_ns"].startswith("inner:")
    assert [i["value"] for i in state["interrupts"]] == [{"question": "go on?"}]
    # The same by checkpoint (the SDK POSTs it).
    at: Any = await nested.threads.get_state(
        thread["thread_id"], checkpoint=deep["checkpoint"], subgraphs=True
    )
    assert at["tasks"][0]["state"]["values"] == state["values"]


@pytest.mark.shared_deployment
async def test_subgraphs_and_the_graph_drawn_with_them(nested: LangGraphClient) -> None:
    found: Any = await nested.assistants.get_subgraphs(NESTED)
    assert list(found) == ["inner"]
    assert sorted(found["inner"]) == [
        "config_schema",
        "context_schema",
        "input_schema",
        "output_schema",
        "state_schema",
    ]
    assert set(found["inner"]["input_schema"]["properties"]) == {"log", "note", "pause"}
    assert list(await nested.assistants.get_subgraphs(NESTED, namespace="inner")) == ["inner"]
    assert await nested.assistants.get_subgraphs(NESTED, namespace="nowhere") == {}
    assert list(await nested.assistants.get_subgraphs(NESTED, recurse=True)) == ["inner"]

    flat = await nested.assistants.get_graph(NESTED)
    assert [n["id"] for n in flat["nodes"]] == ["__start__", "plan", "work", "inner", "__end__"]
    for xray in (True, 1):
        drawn = await nested.assistants.get_graph(NESTED, xray=xray)
        ids = {n["id"] for n in drawn["nodes"]}
        assert {"inner:first", "inner:second"} <= ids and "inner" not in ids
    with pytest.raises(UnprocessableEntityError):
        await nested.http.get(f"/assistants/{NESTED}/graph", params={"xray": "deep"})


async def test_the_run_asked_modes_survive_a_sigkill_of_its_agent(
    service: TurnkeeperServer, nats_server: NatsServer, api_url: str, client: AsyncTurnkeeperClient
) -> None:
    """The parts a run asks the agent to journal keep the durability rule: with the
    agent SIGKILLed mid-step and the run re-driven, each checkpoint and each task is
    streamed once, in order, as in an uninterrupted run (decision 301)."""
    question: Any = {"messages": [{"role": "user", "content": "crash?", "id": "q-1"}]}
    modes: Any = ["checkpoints", "tasks"]

    def shown(parts: list[Any]) -> list[tuple[str, Any]]:
        ids = [int(p.id) for p in parts if p.id]
        assert ids == sorted(set(ids)), "a part came twice or out of order"
        return [
            (p.event, p.data["metadata"]["step"])
            if p.event == "checkpoints"
            else (p.event, (p.data["name"], "result" in p.data))
            for p in parts
            if p.event in ("checkpoints", "tasks")
        ]

    async with (
        hosts_for(THREADPLANE, service, nats_server, replica="lg-modes", step_delay=1.0) as hosts,
        get_client(url=api_url) as sdk,
    ):
        first = await hosts.start()
        thread = await sdk.threads.create()
        stream = sdk.runs.stream(None, THREADPLANE_GRAPH, input=question, stream_mode=modes)
        reference = shown([p async for p in stream])
        assert [s for e, s in reference if e == "checkpoints"] == [-1, 0, 1, 2, 3]
        parts: list[Any] = []
        analyzed = asyncio.Event()

        async def opened_before() -> None:
            async for part in sdk.runs.stream(
                thread["thread_id"], THREADPLANE_GRAPH, input=question, stream_mode=modes
            ):
                parts.append(part)
                if (
                    part.event == "tasks"
                    and part.data["name"] == "analyze"
                    and "result" in part.data
                ):
                    analyzed.set()

        before = asyncio.create_task(opened_before())
        await asyncio.wait_for(analyzed.wait(), PATIENCE)
        await first.kill()  # `plan` is running: each step takes a second
        await hosts.start()
        await asyncio.wait_for(before, PATIENCE)
        assert shown(parts) == reference
        run_id = parts[0].data["run_id"]
        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run_id))
        assert status.state == turns_pb2.TURN_STATE_DONE and status.attempts >= 1  # re-driven once


def test_a_stream_event_becomes_its_named_part_or_none() -> None:
    """The service names a journaled stream part by its namespace, sends it only to a
    stream that asked for its mode, and sends none for an event cut to its size."""
    translator = Translator("r1", frozenset({"tasks", "debug"}))

    def event(seq: int, data: Any) -> EventRecord:
        return EventRecord("r1", seq, 0, "stream", json.dumps(data), 0.0)

    task = {"id": "t1", "name": "first"}
    assert translator.parts(event(1, {"ns": ["inner:t0"], "mode": "tasks", "data": task})) == [
        ("tasks|inner:t0", task)
    ]
    assert translator.parts(event(2, {"ns": [], "mode": "checkpoints", "data": {}})) == []
    assert translator.parts(event(3, {"truncated": True, "bytes": 300000})) == []
    config = {"configurable": {"thread_id": "th", "checkpoint_ns": "", "checkpoint_id": "c2"}}
    debug = {"type": "checkpoint", "step": 0, "payload": {"config": config, "tasks": []}}
    [(name, part)] = translator.parts(event(4, {"ns": [], "mode": "debug", "data": debug}))
    assert name == "debug"
    assert part["payload"]["checkpoint"] == {
        "checkpoint_id": "c2",
        "thread_id": "th",
        "checkpoint_ns": "",
    }
    assert part["payload"]["parent_checkpoint"] is None
