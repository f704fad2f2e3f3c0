"""Assistants as LangGraph's server has them, through its Python SDK unchanged:
created, updated (a new version), listed by version, pointed back at one, deleted,
searched and counted with every filter and paging option, kept in the journal
across a restart of the service; each graph's default assistant under LangGraph's
id for it. And a run's `config` and `context`, merged over its assistant's, reach
the graph (`runtime.context`, `config["configurable"]`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import PATIENCE, Agent
from tests.support.deployment import SharedDeployments
from tests.support.langgraph_host import hosted, hosts_for
from tests.support.nats import NatsServer
from tests.support.paused_runs import paused_runs, until_paused
from tests.support.service import SHARED_DEPLOYMENT_MARK, ServiceFactory

pytestmark = pytest.mark.both_backends

GRAPH = "context"
CONFIG = Path(__file__).resolve().parent / "graphs" / "context.json"
REPLICA = "ctx-1"
# LangGraph's server's id of a graph's default assistant: uuid5 of the graph id in
# this namespace (langgraph_api/graph.py), here computed from the constant alone.
DEFAULT_ID = str(uuid.uuid5(uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8"), GRAPH))


@pytest.fixture
async def context_host(service: TurnkeeperServer, nats_server: NatsServer) -> AsyncIterator[Agent]:
    async with hosted(CONFIG, service, nats_server, replica=REPLICA) as agent:
        yield agent


@pytest.fixture
def context_url(request: pytest.FixtureRequest, backend: str) -> str:
    """The LangGraph API with the context graph hosted: the test's own service and
    `context_host`, or under `shared_deployment` the worker's shared deployment of
    that graph on `backend` (decision 740)."""
    if request.node.get_closest_marker(SHARED_DEPLOYMENT_MARK) is not None:
        deployments: SharedDeployments = request.getfixturevalue("deployments")
        return deployments.get(CONFIG, replica=REPLICA).url
    request.getfixturevalue("context_host")
    url: str = request.getfixturevalue("api_url")
    return url


@pytest.fixture
async def lg(context_url: str) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=context_url)
    try:
        yield client
    finally:
        await client.http.client.aclose()


async def status_of(call: Any) -> int:
    with pytest.raises(httpx.HTTPStatusError) as caught:
        await call
    return caught.value.response.status_code


async def test_search_and_count_filter_sort_and_page(api_url: str, lg: LangGraphClient) -> None:
    """On a deployment of its own (it counts every assistant): first the graph's
    default assistant alone, under LangGraph's id; then three made, searched and
    counted with each filter, sort and page; then the paging headers over those
    four (a search's total, the next offset)."""
    # The default assistant, before any other is made.
    default = await lg.assistants.get(GRAPH)
    assert default["assistant_id"] == DEFAULT_ID
    assert default["graph_id"] == GRAPH and default["name"] == GRAPH
    assert default["metadata"] == {"created_by": "system"} and default["version"] == 1
    assert await lg.assistants.get(DEFAULT_ID) == default
    assert [a["assistant_id"] for a in await lg.assistants.search()] == [DEFAULT_ID]
    schemas = await lg.assistants.get_schemas(DEFAULT_ID)
    context_schema = schemas["context_schema"]
    assert context_schema is not None
    assert set(context_schema["properties"]) == {"model", "user"}
    assert await status_of(lg.assistants.get(str(uuid.uuid4()))) == 404

    # Three more: search and count.
    for name, team in (("Bravo", "x"), ("alpha", "y"), ("Charlie beta", "x")):
        await lg.assistants.create(graph_id=GRAPH, name=name, metadata={"team": team, "n": 1})
    everything = await lg.assistants.search(limit=100)
    assert len(everything) == 4 and await lg.assistants.count() == 4
    # Newest first by default.
    assert [a["name"] for a in everything[:3]] == ["Charlie beta", "alpha", "Bravo"]
    assert await lg.assistants.count(graph_id=GRAPH) == 4
    team_x = await lg.assistants.search(metadata={"team": "x"})
    assert sorted(a["name"] for a in team_x) == ["Bravo", "Charlie beta"]
    assert await lg.assistants.count(metadata={"team": "x"}) == 2
    # A name is a substring, whatever its case.
    assert [a["name"] for a in await lg.assistants.search(name="BET")] == ["Charlie beta"]
    assert await lg.assistants.count(name="a") == 3
    by_name = await lg.assistants.search(
        metadata={"n": 1}, sort_by="name", sort_order="asc", limit=2, offset=1
    )
    assert [a["name"] for a in by_name] == ["Bravo", "Charlie beta"]
    page = await lg.assistants.search(
        sort_by="name", sort_order="desc", limit=2, select=["name", "version"]
    )
    assert page == [{"name": "context", "version": 1}, {"name": "Charlie beta", "version": 1}]
    assert await status_of(lg.assistants.search(graph_id="no-such-graph")) == 404
    assert await status_of(lg.assistants.search(select=["secret"])) == 422  # type: ignore[list-item]

    # The four of them, paged: what a search says of how to page on.
    async with httpx.AsyncClient(base_url=api_url) as http:
        first = await http.post("/assistants/search", json={"limit": 2})
        last = await http.post("/assistants/search", json={"limit": 2, "offset": 2})
    assert len(first.json()) == 2 and first.headers["X-Pagination-Next"] == "2"
    assert len(last.json()) == 2 and "X-Pagination-Next" not in last.headers
    assert last.headers["X-Pagination-Total"] == "4"
    # The SDK's own reading of them.
    paged: Any = await lg.assistants.search(limit=3, response_format="object")
    assert len(paged["assistants"]) == 3 and paged["next"] == "3"
    paged = await lg.assistants.search(limit=3, offset=3, response_format="object")
    assert len(paged["assistants"]) == 1 and paged["next"] is None


@pytest.mark.shared_deployment
async def test_create_update_versions_set_latest_delete(lg: LangGraphClient) -> None:
    made = await lg.assistants.create(
        graph_id=GRAPH,
        context={"model": "small"},
        metadata={"team": "a"},
        name="small one",
        description="the small model",
    )
    aid = made["assistant_id"]
    assert uuid.UUID(aid) and made["version"] == 1 and made["name"] == "small one"
    # LangGraph's server keeps configurable and context one copy of each other.
    assert made["context"] == {"model": "small"}
    assert made["config"] == {"configurable": {"model": "small"}}
    assert made["description"] == "the small model"
    again = await lg.assistants.create(
        graph_id=GRAPH, assistant_id=aid, context={"model": "other"}, if_exists="do_nothing"
    )
    assert again == made
    assert await status_of(lg.assistants.create(graph_id=GRAPH, assistant_id=aid)) == 409
    assert await status_of(lg.assistants.create(graph_id="no-such-graph")) == 404

    updated = await lg.assistants.update(aid, context={"model": "large"}, metadata={"v": 2})
    assert updated["version"] == 2 and updated["context"] == {"model": "large"}
    assert updated["metadata"] == {"team": "a", "v": 2} and updated["name"] == "small one"
    versions = await lg.assistants.get_versions(aid)
    assert [(v["version"], v["context"]) for v in versions] == [
        (2, {"model": "large"}),
        (1, {"model": "small"}),
    ]
    assert [v["version"] for v in await lg.assistants.get_versions(aid, metadata={"v": 2})] == [2]
    assert [v["version"] for v in await lg.assistants.get_versions(aid, limit=1, offset=1)] == [1]

    back = await lg.assistants.set_latest(aid, 1)
    assert back["version"] == 1 and back["context"] == {"model": "small"}
    assert (await lg.assistants.get(aid))["context"] == {"model": "small"}
    assert await status_of(lg.assistants.set_latest(aid, 7)) == 404
    # The next update is a version after every one there is.
    assert (await lg.assistants.update(aid, name="renamed"))["version"] == 3

    await lg.assistants.delete(aid)
    assert await status_of(lg.assistants.get(aid)) == 404
    assert await status_of(lg.assistants.delete(aid)) == 404
    assert await status_of(lg.assistants.get_versions(aid)) == 404


async def test_assistants_survive_a_restart_of_the_service(
    make_service: ServiceFactory, nats_server: NatsServer
) -> None:
    first = await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")
    assert first.web is not None
    async with (
        hosted(CONFIG, first, nats_server, replica="ctx-r"),
        get_client(url=first.web.url.rstrip("/")) as sdk,
    ):
        made = await sdk.assistants.create(graph_id=GRAPH, name="kept", context={"user": "ada"})
        await sdk.assistants.update(made["assistant_id"], name="kept v2")
    await first.stop(0)

    # No replica serves the graph now: its assistants are still there.
    second = await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")
    assert second.web is not None
    sdk = get_client(url=second.web.url.rstrip("/"))
    try:
        found = {a["assistant_id"]: a for a in await sdk.assistants.search()}
        assert set(found) == {made["assistant_id"], DEFAULT_ID}
        kept = found[made["assistant_id"]]
        assert kept["name"] == "kept v2" and kept["version"] == 2
        assert kept["context"] == {"user": "ada"}
        assert [v["version"] for v in await sdk.assistants.get_versions(kept["assistant_id"])] == [
            2,
            1,
        ]
        assert (await sdk.assistants.get(GRAPH))["assistant_id"] == DEFAULT_ID
        # A run of it waits, visibly, for a replica of its graph (decision 371) ...
        run = await sdk.runs.create(None, kept["assistant_id"], input={})
        assert run["status"] == "pending"
        waiting = await sdk.runs.get(run["thread_id"], run["run_id"])
        assert waiting["status"] == "pending"
        # ... and a replica that comes takes it (its startup Redrive) and runs it.
        async with hosted(CONFIG, second, nats_server, replica="ctx-late"):
            done = await asyncio.wait_for(sdk.runs.join(run["thread_id"], run["run_id"]), PATIENCE)
            assert isinstance(done, dict) and done["before"]["user"] == "ada"
            finished = await sdk.runs.get(run["thread_id"], run["run_id"])
            assert finished["status"] == "success"
        # A graph nobody ever served is still unknown.
        with pytest.raises(httpx.HTTPStatusError) as caught:
            await sdk.runs.create(None, "no-such-graph", input={})
        assert caught.value.response.status_code == 404
    finally:
        await sdk.http.client.aclose()


@pytest.mark.shared_deployment
async def test_a_runs_context_and_config_reach_the_graph(lg: LangGraphClient) -> None:
    # Nothing given: the context schema's defaults.
    plain = await lg.runs.wait(None, GRAPH, input={})
    assert isinstance(plain, dict)
    assert plain["before"]["model"] == "default-model" and plain["before"]["user"] == "nobody"

    given = await lg.runs.wait(None, GRAPH, input={}, context={"model": "m1", "user": "ada"})
    assert isinstance(given, dict)
    assert given["before"]["model"] == "m1" and given["before"]["user"] == "ada"
    # LangGraph's server mirrors the context into configurable.
    assert given["before"]["configurable"]["model"] == "m1"

    configured = await lg.runs.wait(
        None,
        GRAPH,
        input={},
        config={"configurable": {"prompt": "be brief", "user": "bob"}, "tags": ["t1"]},
    )
    assert isinstance(configured, dict)
    seen = configured["after"]
    assert seen["configurable"]["prompt"] == "be brief" and seen["tags"] == ["t1"]
    # ... and configurable into the context (the keys its schema names).
    assert seen["user"] == "bob" and seen["model"] == "default-model"

    # Both at once: refused as LangGraph's server refuses it.
    both = lg.runs.wait(
        None, GRAPH, input={}, config={"configurable": {"a": 1}}, context={"model": "x"}
    )
    assert await status_of(both) == 400


@pytest.mark.shared_deployment
async def test_the_assistants_context_is_under_the_runs(lg: LangGraphClient) -> None:
    assistant = await lg.assistants.create(
        graph_id=GRAPH, context={"model": "assistant-model", "user": "assistant-user"}
    )
    aid = assistant["assistant_id"]
    own = await lg.runs.wait(None, aid, input={})
    assert isinstance(own, dict)
    assert (own["before"]["model"], own["before"]["user"]) == ("assistant-model", "assistant-user")
    assert own["before"]["configurable"]["assistant_id"] == aid
    merged = await lg.runs.wait(None, aid, input={}, context={"user": "run-user"})
    assert isinstance(merged, dict)
    assert (merged["after"]["model"], merged["after"]["user"]) == ("assistant-model", "run-user")
    # A run tags its thread with its assistant, as LangGraph's server does (a chat
    # UI lists an assistant's threads by it).
    tagged = await lg.threads.search(metadata={"assistant_id": aid})
    assert len(tagged) == 2
    assert all((t["metadata"] or {}).get("graph_id") == GRAPH for t in tagged)
    # An update is what the next run gets.
    await lg.assistants.update(aid, context={"model": "newer"})
    newer = await lg.runs.wait(None, aid, input={})
    assert isinstance(newer, dict) and newer["before"]["model"] == "newer"
    # The graph's default assistant: LangGraph's id in configurable, whatever the
    # run says it is.
    default = await lg.runs.wait(
        None, GRAPH, input={}, config={"configurable": {"assistant_id": "spoofed"}}
    )
    assert isinstance(default, dict)
    assert default["before"]["configurable"]["assistant_id"] == DEFAULT_ID


@pytest.mark.slow
async def test_a_re_drive_after_a_sigkill_keeps_the_runs_context_and_config(
    service: TurnkeeperServer,
    nats_server: NatsServer,
    api_url: str,
    client: AsyncTurnkeeperClient,
) -> None:
    async with (
        hosts_for(
            CONFIG,
            service,
            nats_server,
            replica="ctx-crash",
            # `pause` takes this long: the window the agent is killed in.
            extra_env={"CONTEXT_STEP_DELAY": "3"},
        ) as hosts,
        get_client(url=api_url) as sdk,
    ):
        first = await hosts.start()
        assistant = await sdk.assistants.create(graph_id=GRAPH, context={"model": "kept-model"})
        parts: list[Any] = []
        before = asyncio.Event()

        async def streamed() -> None:
            async for part in sdk.runs.stream(
                None,
                assistant["assistant_id"],
                input={},
                context={"user": "kept-user"},
                stream_mode=["values", "updates"],
            ):
                parts.append(part)
                if part.event == "updates" and "before" in part.data:
                    before.set()

        stream = asyncio.create_task(streamed())
        await asyncio.wait_for(before.wait(), PATIENCE)
        await first.kill()
        # The re-drive's `pause` needs no window: it takes no time on the next host.
        await hosts.start(extra_env={"CONTEXT_STEP_DELAY": "0"})
        await asyncio.wait_for(stream, PATIENCE)
        final = [p.data for p in parts if p.event == "values"][-1]
        # `after` ran in the re-drive, with the run's context and config as journaled.
        assert final["after"] == final["before"]
        assert (final["after"]["model"], final["after"]["user"]) == ("kept-model", "kept-user")
        assert final["after"]["configurable"]["assistant_id"] == assistant["assistant_id"]
        run_id = parts[0].data["run_id"]
        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run_id))
        assert status.attempts >= 1  # re-driven once (attempts count re-drives)


async def test_deleting_an_assistant_cancels_its_runs_and_may_take_its_threads(
    service: TurnkeeperServer, nats_server: NatsServer, api_url: str
) -> None:
    # As LangGraph's server deletes one: its running and queued runs are cancelled
    # (a run of another assistant goes on), and with delete_threads its threads go.
    # `pause` outlasts the test: the runs are running when their assistant goes.
    async with paused_runs(service, nats_server, api_url, replica="ctx-delete") as sdk:
        kept, dropped, taken = [
            (await sdk.assistants.create(graph_id=GRAPH, name=name))["assistant_id"]
            for name in ("kept", "dropped", "taken")
        ]
        runs = {}
        for aid in (kept, dropped, taken):
            thread = (await sdk.threads.create())["thread_id"]
            runs[aid] = (thread, (await sdk.runs.create(thread, aid, input={}))["run_id"])
        # A second run on the dropped assistant's thread waits behind the first.
        queued = await sdk.runs.create(
            runs[dropped][0], dropped, input={}, multitask_strategy="enqueue"
        )
        for thread, run_id in runs.values():
            await _until_status(sdk, thread, run_id, "running")

        await sdk.assistants.delete(dropped)
        thread, run_id = runs[dropped]
        for one in (run_id, queued["run_id"]):
            await sdk.runs.join(thread, one)  # ended: cancelled, not left running
            assert (await sdk.runs.get(thread, one))["status"] not in ("running", "pending")
        assert (await sdk.threads.get(thread))["thread_id"] == thread  # kept

        await sdk.assistants.delete(taken, delete_threads=True)
        assert await status_of(sdk.threads.get(runs[taken][0])) == 404
        assert await status_of(sdk.runs.get(*runs[taken])) == 404

        thread, run_id = runs[kept]
        assert (await sdk.runs.get(thread, run_id))["status"] == "running"
        await sdk.runs.cancel(thread, run_id, wait=True)


async def _until_status(sdk: LangGraphClient, thread: str, run_id: str, status: str) -> None:
    """Until the run is in its pause, then shows `status`."""
    await until_paused(sdk, thread, run_id)
    assert (await sdk.runs.get(thread, run_id))["status"] == status
