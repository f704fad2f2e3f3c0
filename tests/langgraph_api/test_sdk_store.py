"""The store (LangGraph's long-term memory, `client.store.*`) through LangGraph's
Python SDK unchanged, on both backends: the same calls made against LangGraph's own
`InMemoryStore` (what `langgraph dev` serves) and against turnkeeper give the same
items and namespaces; paging, filters, TTL with refresh on read, the reference's
refusals, and items kept across a restart of the service."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph.store.memory import InMemoryStore
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.engine.store_items import ttl_of_config
from turnkeeper_server.journal import store_items

from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

pytestmark = pytest.mark.both_backends

ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any]]] = [
    (("users", "alice", "memories"), "m1", {"text": "likes tea", "score": 3, "tags": ["a"]}),
    (
        ("users", "alice", "memories"),
        "m2",
        {"text": "has a cat", "score": 7, "pet": {"kind": "cat"}},
    ),
    (("users", "alice", "prefs"), "theme", {"text": "dark", "score": 5}),
    (("users", "bob", "memories"), "m1", {"text": "likes coffee", "score": 9}),
    (("docs",), "d1", {"text": "a document", "score": 1}),
]
SEARCHES: list[dict[str, Any]] = [
    {"namespace_prefix": ("users",)},
    {"namespace_prefix": ("users", "alice")},
    {"namespace_prefix": ("users", "alice", "memories")},
    {"namespace_prefix": ("users", "al")},  # a label prefix is not a namespace prefix
    {"namespace_prefix": ()},
    {"namespace_prefix": ("users",), "filter": {"score": {"$gt": 4}}},
    {"namespace_prefix": ("users",), "filter": {"score": {"$gte": 5, "$lt": 9}}},
    {"namespace_prefix": ("users",), "filter": {"text": "likes tea"}},
    {"namespace_prefix": ("users",), "filter": {"pet": {"kind": "cat"}}},
    {"namespace_prefix": ("users",), "filter": {"tags": ["a"]}},
    {"namespace_prefix": ("users",), "filter": {"score": {"$ne": 3}}},
    {"namespace_prefix": (), "filter": {"missing": 1}},
]
LISTINGS: list[dict[str, Any]] = [
    {},
    {"prefix": ("users",)},
    {"prefix": ("users", "*", "memories")},
    {"suffix": ("memories",)},
    {"max_depth": 2},
    {"prefix": ("users",), "max_depth": 2},
    {"limit": 2, "offset": 1},
    {"prefix": ("nobody",)},
]


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")


def _url(service: TurnkeeperServer) -> str:
    assert service.web is not None
    return service.web.url.rstrip("/")


@pytest.fixture
async def sdk(service: TurnkeeperServer) -> AsyncIterator[LangGraphClient]:
    client = get_client(url=_url(service))
    try:
        yield client
    finally:
        await client.http.client.aclose()


def _found(items: list[Any]) -> set[tuple[tuple[str, ...], str, str]]:
    return {(tuple(i["namespace"]), i["key"], repr(sorted(i["value"].items()))) for i in items}


async def _fill(sdk: LangGraphClient, reference: InMemoryStore) -> None:
    for namespace, key, value in ITEMS:
        await sdk.store.put_item(namespace, key, value)
        await reference.aput(namespace, key, value)


async def test_same_items_namespaces_and_searches_as_langgraphs_store(
    sdk: LangGraphClient,
) -> None:
    reference = InMemoryStore()
    await _fill(sdk, reference)

    for namespace, key, value in ITEMS:
        got = await sdk.store.get_item(namespace, key)
        assert got is not None
        want = await reference.aget(namespace, key)
        assert want is not None
        assert (got["namespace"], got["key"], got["value"]) == (list(namespace), key, value)
        assert (want.namespace, want.value) == (namespace, value)
        assert str(got["created_at"]).endswith("+00:00") and got["updated_at"] >= got["created_at"]
    assert await sdk.store.get_item(("users", "carol"), "m1") is None

    for search in SEARCHES:
        got_items = (
            await sdk.store.search_items(
                search["namespace_prefix"], filter=search.get("filter"), limit=100
            )
        )["items"]
        want_items = await reference.asearch(
            search["namespace_prefix"], filter=search.get("filter"), limit=100
        )
        assert _found(got_items) == _found([w.dict() for w in want_items]), search
        assert all(i["score"] is None for i in got_items)

    for listing in LISTINGS:
        got_ns = (await sdk.store.list_namespaces(**listing))["namespaces"]
        want_ns = await reference.alist_namespaces(**listing)
        assert [tuple(n) for n in got_ns] == want_ns, listing


async def test_update_delete_and_paging(sdk: LangGraphClient) -> None:
    reference = InMemoryStore()
    await _fill(sdk, reference)
    first = await sdk.store.get_item(("docs",), "d1")
    assert first is not None
    await sdk.store.put_item(("docs",), "d1", {"text": "changed"})
    changed = await sdk.store.get_item(("docs",), "d1")
    assert changed is not None and changed["value"] == {"text": "changed"}
    assert changed["created_at"] == first["created_at"]
    assert changed["updated_at"] > first["updated_at"]

    await sdk.store.delete_item(("users", "bob", "memories"), "m1")
    assert await sdk.store.get_item(("users", "bob", "memories"), "m1") is None
    assert ["users", "bob", "memories"] not in (await sdk.store.list_namespaces())["namespaces"]

    # Newest first, and pages that add up to the whole search, none twice.
    whole = (await sdk.store.search_items(("users",), limit=100))["items"]
    assert [i["updated_at"] for i in whole] == sorted(
        (i["updated_at"] for i in whole), reverse=True
    )
    pages = []
    for offset in range(0, len(whole), 2):
        pages += (await sdk.store.search_items(("users",), limit=2, offset=offset))["items"]
    assert [(i["namespace"], i["key"]) for i in pages] == [
        (i["namespace"], i["key"]) for i in whole
    ]
    assert len(whole) == 3
    # With a filter too: read until the page is full, the same pages.
    wanted = {"score": {"$gt": 0}}
    matched = (await sdk.store.search_items((), filter=wanted, limit=100))["items"]
    paged = []
    for offset in range(0, len(matched) + 2, 2):
        paged += (await sdk.store.search_items((), filter=wanted, limit=2, offset=offset))["items"]
    assert [(i["namespace"], i["key"]) for i in paged] == [
        (i["namespace"], i["key"]) for i in matched
    ]
    assert len(matched) == 3


async def test_bad_requests_refused_as_the_reference_refuses_them(
    sdk: LangGraphClient, service: TurnkeeperServer
) -> None:
    async with httpx.AsyncClient(base_url=_url(service)) as http:
        bad_label = await http.put(
            "/store/items", json={"namespace": ["a.b"], "key": "k", "value": {}}
        )
        assert bad_label.status_code == 422 and "without periods" in bad_label.text
        not_object = await http.put(
            "/store/items", json={"namespace": ["a"], "key": "k", "value": [1]}
        )
        assert not_object.status_code == 422 and "value must be an object" in not_object.text
        no_key = await http.get("/store/items", params={"namespace": "a"})
        assert no_key.status_code == 400 and "Key is required" in no_key.text
        bad_ttl = await http.put(
            "/store/items", json={"namespace": ["a"], "key": "k", "value": {}, "ttl": -1}
        )
        assert bad_ttl.status_code == 422 and "ttl" in bad_ttl.text
        await sdk.store.put_item(("a",), "k", {"x": 1})
        bad_operator = await http.post(
            "/store/items/search", json={"namespace_prefix": [], "filter": {"x": {"$in": [1]}}}
        )
        assert bad_operator.status_code in (400, 422) and "$in" in bad_operator.text
    # No index is configured: a semantic query is refused, not answered unranked.
    with pytest.raises(httpx.HTTPStatusError) as refused:
        await sdk.store.search_items(("a",), query="tea")
    assert refused.value.response.status_code == 422
    assert "semantic search" in refused.value.response.text


async def test_items_kept_across_a_restart(
    make_service: ServiceFactory, nats_server: NatsServer, service: TurnkeeperServer
) -> None:
    client = get_client(url=_url(service))
    await client.store.put_item(("users", "alice"), "memory", {"text": "remember me"})
    await client.http.client.aclose()
    await service.stop(0)

    again = await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")
    client = get_client(url=_url(again))
    try:
        item = await client.store.get_item(("users", "alice"), "memory")
        assert item is not None and item["value"] == {"text": "remember me"}
    finally:
        await client.http.client.aclose()


async def test_ttl_expires_and_a_read_refreshes_it(service: TurnkeeperServer) -> None:
    """With explicit clocks: an item put with a ttl of 1 minute at t=1000 expires at
    1060 unless a read with refresh moved it; expired items are not read, searched
    or listed, and the next write deletes them."""
    db = service.db
    ns = ("users", "alice")
    await db.write(lambda tx: store_items.put(tx, ns, "short", {"v": 1}, 1000.0, 1.0))
    await db.write(lambda tx: store_items.put(tx, ns, "kept", {"v": 2}, 1000.0, None))

    assert await db.read(lambda c: store_items.read(c, ns, "short", 1059.0)) is not None
    assert await db.read(lambda c: store_items.read(c, ns, "short", 1061.0)) is None
    # A read with refresh at 1050 moves the expiry to 1110.
    await db.write(lambda tx: store_items.get(tx, ns, "short", 1050.0, refresh=True))
    assert await db.read(lambda c: store_items.read(c, ns, "short", 1100.0)) is not None
    # A read without refresh does not.
    await db.write(lambda tx: store_items.get(tx, ns, "short", 1100.0, refresh=False))
    assert await db.read(lambda c: store_items.read(c, ns, "short", 1111.0)) is None
    found = await db.read(lambda c: store_items.search(c, ns, [], 10, 0, 1111.0))
    assert [i.key for i in found] == ["kept"]
    # Sweeping at 1111 deletes the expired item and keeps the other.
    assert await db.write(lambda tx: store_items.sweep(tx, 1111.0)) == 1
    assert await db.read(lambda c: store_items.read(c, ns, "kept", 10**10)) is not None


async def test_ttl_over_the_api_with_refresh_on_read(
    sdk: LangGraphClient, service: TurnkeeperServer
) -> None:
    """A ttl put over the API is kept with the item; a read moves its expiry unless
    it says refresh_ttl=False (langgraph.json's store.ttl.refresh_on_read default)."""

    async def expiry() -> float:
        row = await service.db.read(lambda c: store_items.read(c, ("t",), "k", 0.0))
        assert row is not None and row.expires_at is not None and row.ttl_minutes == 5
        return row.expires_at

    await sdk.store.put_item(("t",), "k", {"v": 1}, ttl=5)
    put_at = await expiry()
    await sdk.store.get_item(("t",), "k", refresh_ttl=False)
    assert await expiry() == put_at
    await sdk.store.get_item(("t",), "k")
    refreshed = await expiry()
    assert refreshed > put_at
    await sdk.store.search_items(("t",), refresh_ttl=True)
    assert await expiry() > refreshed


async def test_the_langgraph_jsons_store_ttl_applies(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    """`store.ttl`: an item put without a ttl gets `default_ttl`, and a read that
    does not say refreshes only if `refresh_on_read` says so."""
    config = tmp_path / "langgraph.json"
    config.write_text(
        json.dumps({"graphs": {}, "store": {"ttl": {"default_ttl": 2, "refresh_on_read": False}}})
    )
    service = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", langgraph_config=config
    )
    client = get_client(url=_url(service))
    try:
        await client.store.put_item(("t",), "k", {"v": 1})
        row = await service.db.read(lambda c: store_items.read(c, ("t",), "k", 0.0))
        assert row is not None and row.ttl_minutes == 2 and row.expires_at is not None
        await client.store.get_item(("t",), "k")
        again = await service.db.read(lambda c: store_items.read(c, ("t",), "k", 0.0))
        assert again is not None and again.expires_at == row.expires_at
    finally:
        await client.http.client.aclose()

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"store": {"ttl": {"default_ttl": "soon"}}}))
    with pytest.raises(ValueError, match="default_ttl must be a positive number"):
        ttl_of_config(bad)
