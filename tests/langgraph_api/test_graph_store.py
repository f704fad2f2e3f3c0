"""The store inside graphs: a graph hosted by `turnkeeper agent` gets the service's
store (`runtime.store`, `get_store()`) through the client's remote BaseStore over
StoreService, keeps its memory across a restart of the service, and shares it with
the LangGraph API (`client.store.*`). The remote store answers LangGraph's own
BaseStore calls as InMemoryStore does, on both backends; a batch fenced by a stale
attempt is refused and stores nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import Item
from langgraph.store.memory import InMemoryStore
from langgraph_sdk import get_client
from turnkeeper._connection import ConnectionOptions
from turnkeeper.agent._store import RemoteStore
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import StaleAttempt, WrongState
from turnkeeper.v1 import checkpoints_pb2, store_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.langgraph_host import hosted
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

pytestmark = pytest.mark.both_backends

CONFIG = Path(__file__).resolve().parent / "graphs" / "memory.json"


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")


@pytest.fixture
async def remote(service: TurnkeeperServer) -> AsyncIterator[RemoteStore]:
    store = RemoteStore(ConnectionOptions(target=service.address))
    try:
        yield store
    finally:
        await store.aclose()


def _url(service: TurnkeeperServer) -> str:
    assert service.web is not None
    return service.web.url.rstrip("/")


async def _remember(
    service: TurnkeeperServer, nats_server: NatsServer, facts: list[str]
) -> list[Any]:
    """Each fact remembered by one run of the memory graph, hosted against
    `service`; what each run answered."""
    async with (
        hosted(CONFIG, service, nats_server, replica="m-1"),
        get_client(url=_url(service)) as client,
    ):
        answers = []
        for fact in facts:
            out = await client.runs.wait(None, "memory", input={"user": "ada", "fact": fact})
            assert isinstance(out, dict), out
            answers.append(out["facts"])
        return answers


async def test_a_graphs_memory_is_kept_across_a_restart_and_shared_with_the_api(
    make_service: ServiceFactory, nats_server: NatsServer, service: TurnkeeperServer
) -> None:
    first = await _remember(service, nats_server, ["likes tea", "has a cat"])
    assert first == [["likes tea"], ["has a cat", "likes tea"]]
    await service.stop(0)

    again = await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")
    second = await _remember(again, nats_server, ["lives in Oslo"])
    assert second == [["lives in Oslo", "has a cat", "likes tea"]]

    client = get_client(url=_url(again))
    try:
        items = (await client.store.search_items(("memories", "ada"), limit=10))["items"]
    finally:
        await client.http.client.aclose()
    assert sorted(i["value"]["fact"] for i in items) == ["has a cat", "likes tea", "lives in Oslo"]


def _plain(items: Sequence[Item]) -> list[tuple[tuple[str, ...], str, Any]]:
    return sorted((i.namespace, i.key, i.value) for i in items)


async def test_the_remote_store_answers_as_langgraphs_in_memory_store(
    remote: RemoteStore,
) -> None:
    # (InMemoryStore lists a namespace whose last item was deleted, which the
    # database-backed stores, LangGraph's own and turnkeeper's, do not: docs keeps one.)
    reference = InMemoryStore()
    for store in (remote, reference):
        await store.aput(("users", "ada"), "a", {"n": 1, "tag": "x"})
        await store.aput(("users", "ada"), "b", {"n": 5, "tag": "y"})
        await store.aput(("users", "bob", "notes"), "c", {"n": 9})
        await store.aput(("users", "ada"), "a", {"n": 2, "tag": "x"})
        await store.aput(("docs",), "kept", {"n": 0})
        await store.aput(("docs",), "gone", {"n": 0})
        await store.adelete(("docs",), "gone")

    for store in (remote, reference):
        got = await store.aget(("users", "ada"), "a")
        assert got is not None and got.value == {"n": 2, "tag": "x"}
        assert await store.aget(("docs",), "gone") is None
    for prefix, filter_ in [
        (("users",), None),
        (("users", "ada"), {"tag": "x"}),
        (("users",), {"n": {"$gte": 5}}),
        ((), None),
    ]:
        assert _plain(await remote.asearch(prefix, filter=filter_)) == _plain(
            await reference.asearch(prefix, filter=filter_)
        ), (prefix, filter_)
    listings: list[dict[str, Any]] = [
        {},
        {"prefix": ("users",)},
        {"suffix": ("notes",)},
        {"max_depth": 2},
        {"prefix": ("users", "*"), "limit": 1, "offset": 1},
    ]
    for kwargs in listings:
        assert await remote.alist_namespaces(**kwargs) == await reference.alist_namespaces(
            **kwargs
        ), kwargs
    # The blocking API too (a sync node, which LangGraph runs in a thread).
    got = await asyncio.to_thread(remote.get, ("users", "ada"), "b")
    assert got is not None and got.value == {"n": 5, "tag": "y"}


async def test_a_batch_fenced_by_a_stale_attempt_stores_nothing(
    service: TurnkeeperServer, nats_server: NatsServer, remote: RemoteStore
) -> None:
    async with (
        hosted(CONFIG, service, nats_server, replica="m-1"),
        get_client(url=_url(service)) as client,
    ):
        thread = await client.threads.create()
        await client.runs.wait(thread["thread_id"], "memory", input={"user": "z", "fact": "f"})
        run_id = (await client.runs.list(thread["thread_id"]))[0]["run_id"]

    grpc = AsyncTurnkeeperClient(ConnectionOptions(target=service.address))
    try:
        turn = (await grpc.get_turn(turns_pb2.GetTurnRequest(turn_id=run_id))).turn
        put = store_pb2.StoreOperation(
            put=store_pb2.StorePut(namespace=["zombie"], key="k", value_json='{"v": 1}')
        )
        # An attempt re-driven away, then the current attempt of a finished turn.
        for attempt, refused in ((turn.attempts + 1, StaleAttempt), (turn.attempts, WrongState)):
            with pytest.raises(refused):
                await grpc.store_batch(
                    store_pb2.StoreBatchRequest(
                        operations=[put],
                        fence=checkpoints_pb2.TurnFence(turn_id=run_id, attempt=attempt),
                    )
                )
    finally:
        await grpc.close()
    assert await remote.aget(("zombie",), "k") is None
