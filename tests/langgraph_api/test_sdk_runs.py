"""Interrupt flows and run records as LangGraph's server has them, with its own
clients unchanged (`langgraph-sdk`, `RemoteGraph`). What each test expects is what
`langgraph dev` (langgraph-api 0.16.7) answered to the same calls on the same graph
(issue 48, items 4 and 8): every run on an interrupted thread is a new run, a run
stopped at an interrupt is `success` (its thread `interrupted`), a create answers
`pending`, a run keeps its metadata and kwargs, the default strategy is `enqueue`."""

from __future__ import annotations

from typing import Any, cast

import httpx
import pytest
from langgraph.pregel.remote import RemoteGraph
from langgraph.types import Command
from langgraph_sdk.client import LangGraphClient
from turnkeeper._run_request import default_assistant_id
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.web.langgraph import runs as runs_module

from tests.support.agents import Agent
from tests.support.service import ServiceFactory

# On SQLite and on PostgreSQL (a real cluster the tests start).
pytestmark = pytest.mark.both_backends

APPROVAL = "approval"
QUESTION = "approve the draft?"


async def _parked(sdk: LangGraphClient, topic: str = "x") -> tuple[str, dict[str, Any]]:
    """A thread whose first run stopped at review's interrupt(); (thread_id, run)."""
    thread = await sdk.threads.create()
    run = await sdk.runs.create(thread["thread_id"], APPROVAL, input={"topic": topic})
    await sdk.runs.join(thread["thread_id"], run["run_id"])
    return thread["thread_id"], dict(run)


def _asks(result: Any) -> list[Any]:
    return [i["value"]["question"] for i in result.get("__interrupt__", [])]


@pytest.mark.shared_deployment
async def test_new_input_on_an_interrupted_thread_is_a_new_run(sdk: LangGraphClient) -> None:
    thread_id, first = await _parked(sdk, "a")
    result: Any = await sdk.runs.wait(thread_id, APPROVAL, input={"topic": "b"})
    # Started over with the new input: drafted again, and asks again.
    assert result["draft"] == "a draft about b"
    assert _asks(result) == [QUESTION]
    runs = await sdk.runs.list(thread_id)
    assert len(runs) == 2 and runs[1]["run_id"] == first["run_id"]
    assert [r["status"] for r in runs] == ["success", "success"]
    assert (await sdk.threads.get(thread_id))["status"] == "interrupted"


@pytest.mark.shared_deployment
async def test_null_input_on_an_interrupted_thread_runs_the_node_again(
    sdk: LangGraphClient,
) -> None:
    """Not a resume with None: the node runs again and asks again (nobody answered)."""
    thread_id, _ = await _parked(sdk)
    result: Any = await sdk.runs.wait(thread_id, APPROVAL, input=None)
    assert "verdict" not in result
    assert result["draft"] == "a draft about x"
    assert _asks(result) == [QUESTION]
    state = await sdk.threads.get_state(thread_id)
    assert state["next"] == ["review"]
    # ... and it is still answerable.
    answered: Any = await sdk.runs.wait(thread_id, APPROVAL, command={"resume": "yes"})
    assert answered["verdict"] == "approved"


@pytest.mark.shared_deployment
async def test_a_resume_with_an_update(sdk: LangGraphClient) -> None:
    thread_id, _ = await _parked(sdk)
    result: Any = await sdk.runs.wait(
        thread_id, APPROVAL, command={"resume": "yes", "update": {"topic": "y"}}
    )
    assert result == {"topic": "y", "draft": "a draft about x", "verdict": "approved"}


@pytest.mark.shared_deployment
async def test_remote_graph_resumes_an_interrupt(api_url: str, sdk: LangGraphClient) -> None:
    """RemoteGraph sends the whole Command (`graph: null`, `goto: []`)."""
    thread_id, _ = await _parked(sdk)
    remote = RemoteGraph(APPROVAL, url=api_url)
    config: Any = {"configurable": {"thread_id": thread_id}}
    await remote.ainvoke(Command(resume="yes"), config=config)
    state: Any = await sdk.threads.get_state(thread_id)
    assert state["values"]["verdict"] == "approved"
    assert state["next"] == []


@pytest.mark.shared_deployment
async def test_a_resume_with_nothing_interrupted_is_a_run_that_changes_nothing(
    sdk: LangGraphClient,
) -> None:
    thread_id, _ = await _parked(sdk)
    done: Any = await sdk.runs.wait(thread_id, APPROVAL, command={"resume": "no"})
    again: Any = await sdk.runs.wait(thread_id, APPROVAL, command={"resume": "yes"})
    assert again == done == {"topic": "x", "draft": "a draft about x", "verdict": "rejected"}
    assert [r["status"] for r in await sdk.runs.list(thread_id)] == ["success"] * 3


@pytest.mark.shared_deployment
async def test_each_resume_is_a_run_of_its_own(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    first = await sdk.runs.create(thread_id, APPROVAL, input={"topic": "x"})
    # As LangGraph's server answers a create.
    assert first["status"] == "pending"
    await sdk.runs.join(thread_id, first["run_id"])
    # Stopped at the interrupt: the run is over (success), its thread interrupted.
    assert (await sdk.runs.get(thread_id, first["run_id"]))["status"] == "success"
    assert (await sdk.threads.get(thread_id))["status"] == "interrupted"
    resume = await sdk.runs.create(thread_id, APPROVAL, command={"resume": "yes"})
    assert resume["run_id"] != first["run_id"]
    # The resume's stream is its own: the draft's update and the old interrupt are
    # the first run's.
    parts = [
        (p.event, p.data)
        async for p in sdk.runs.join_stream(thread_id, resume["run_id"], stream_mode="updates")
    ]
    assert [data for event, data in parts if event == "updates"] == [
        {"review": {"verdict": "approved"}}
    ]
    runs = {r["run_id"]: r["status"] for r in await sdk.runs.list(thread_id)}
    assert runs == {first["run_id"]: "success", resume["run_id"]: "success"}
    assert (await sdk.threads.get(thread_id))["status"] == "idle"


@pytest.mark.shared_deployment
async def test_a_run_keeps_its_metadata_kwargs_and_strategy(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create(metadata={"team": "blue"})
    thread_id = thread["thread_id"]
    created = await sdk.runs.create(
        thread_id,
        APPROVAL,
        input={"topic": "m"},
        metadata={"k": 1},
        stream_mode=["updates", "custom"],
    )
    await sdk.runs.join(thread_id, created["run_id"])
    got: Any = await sdk.runs.get(thread_id, created["run_id"])
    for run in (cast(Any, created), got):
        # The assistant's, the thread's and the run's own, as the reference merges them.
        assert run["metadata"] == {
            "created_by": "system",
            "graph_id": APPROVAL,
            "assistant_id": default_assistant_id(APPROVAL),
            "team": "blue",
            "k": 1,
        }
        assert run["kwargs"]["input"] == {"topic": "m"}
        assert run["kwargs"]["stream_mode"] == ["updates", "custom"]
        assert run["kwargs"]["command"] is None
        # The reference's default strategy.
        assert run["multitask_strategy"] == "enqueue"
    listed: Any = await sdk.runs.list(thread_id)
    assert listed[0]["kwargs"]["stream_mode"] == ["updates", "custom"]
    # Joined without modes: the run's own modes (not values).
    events = [p.event async for p in sdk.runs.join_stream(thread_id, created["run_id"])]
    assert set(events) == {"metadata", "updates", "custom"}


@pytest.mark.shared_deployment
async def test_the_default_strategy_queues_a_run_behind_a_busy_thread(
    sdk: LangGraphClient,
) -> None:
    """LangGraph's server's default is enqueue: a second run on a busy thread waits
    its turn (reject was the default here, a 409)."""
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    first = await sdk.runs.create(thread_id, "durable-execution", input=QUESTION_INPUT)
    second = await sdk.runs.create(thread_id, "durable-execution", input=QUESTION_INPUT)
    await sdk.runs.join(thread_id, second["run_id"])
    statuses = {r["run_id"]: r["status"] for r in await sdk.runs.list(thread_id)}
    assert statuses == {first["run_id"]: "success", second["run_id"]: "success"}


QUESTION_INPUT: Any = {"messages": [{"role": "user", "content": "what is a queue?"}]}


@pytest.mark.shared_deployment
async def test_a_run_queued_behind_a_run_that_stops_at_an_interrupt_starts(
    sdk: LangGraphClient,
) -> None:
    """LangGraph's server: a run stopped at an interrupt is over, so the run queued
    behind it runs (here it answers the interrupt)."""
    thread = await sdk.threads.create()
    thread_id = thread["thread_id"]
    first = await sdk.runs.create(thread_id, APPROVAL, input={"topic": "q"})
    # Sent while the first runs (or after it stopped: either way it answers it).
    answered: Any = await sdk.runs.wait(thread_id, APPROVAL, command={"resume": "yes"})
    assert answered["verdict"] == "approved"
    statuses = {r["run_id"]: r["status"] for r in await sdk.runs.list(thread_id)}
    assert statuses[first["run_id"]] == "success" and len(statuses) == 2


async def test_a_join_follows_the_runs_modes_after_the_service_restarted(
    make_service: ServiceFactory, service: TurnkeeperServer, host: Agent, sdk: LangGraphClient
) -> None:
    """What the SDK does when its stream drops (it GETs the stream's Location with
    its Last-Event-ID and no modes), against a service started again: the run's
    modes are the stored ones."""
    thread_id, _ = await _parked(sdk)
    run = await sdk.runs.create(
        thread_id, APPROVAL, command={"resume": "yes"}, stream_mode=["updates"]
    )
    await sdk.runs.join(thread_id, run["run_id"])
    settings = service.settings
    await host.close()
    await service.stop(0)
    again = await make_service(
        nats_url=settings.nats_url, http_listen="127.0.0.1:0", database_url=settings.database_url
    )
    assert again.web is not None
    async with httpx.AsyncClient(base_url=again.web.url) as http:
        location = f"/threads/{thread_id}/runs/{run['run_id']}/stream"
        async with http.stream("GET", location, headers={"Last-Event-ID": "0"}) as response:
            assert response.status_code == 200
            body = (await response.aread()).decode()
    events = [
        line.removeprefix("event: ") for line in body.splitlines() if line.startswith("event:")
    ]
    assert set(events) == {"metadata", "updates"}, body


@pytest.mark.shared_deployment
async def test_a_last_event_id_that_is_not_a_seq_replays_nothing(sdk: LangGraphClient) -> None:
    """LangGraph's server compares an id it does not know and replays nothing after
    it; it is not a 422."""
    thread_id, run = await _parked(sdk)
    parts = [
        p.event
        async for p in sdk.runs.join_stream(
            thread_id, run["run_id"], stream_mode="updates", last_event_id="1796466160158-0"
        )
    ]
    assert "updates" not in parts
    everything = [
        p.event async for p in sdk.runs.join_stream(thread_id, run["run_id"], stream_mode="updates")
    ]
    assert "updates" in everything


async def test_wait_sends_newlines_while_the_run_goes_on(
    api_url: str, host: Agent, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference sends one every 5 s; the run here lasts longer than 1 ms.
    monkeypatch.setattr(runs_module, "WAIT_KEEPALIVE_SECONDS", 0.001)
    async with httpx.AsyncClient(base_url=api_url, timeout=60) as http:
        thread = (await http.post("/threads", json={})).json()
        async with http.stream(
            "POST",
            f"/threads/{thread['thread_id']}/runs/wait",
            json={"assistant_id": "durable-execution", "input": QUESTION_INPUT},
        ) as response:
            assert response.status_code == 200
            assert response.headers["Location"].endswith("/join")
            body = await response.aread()
    assert body.startswith(b"\n")
    # Whitespace before the JSON: a JSON parser (the SDK's) reads it as the outcome.
    outcome = httpx.Response(200, content=body).json()
    assert outcome["step"] == "generate"
