"""The store under a langgraph.json's auth: its `@auth.on.store` handler is asked
for each store call with the reference's values and may change the namespace, so
each end user reads, searches and lists only their own memories."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from langgraph_sdk import get_client
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

AUTH = Path(__file__).resolve().parent / "end_users" / "store_auth.py"
ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    return await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", langgraph_auth=f"{AUTH}:auth"
    )


async def test_each_user_sees_only_their_own_memories(service: TurnkeeperServer) -> None:
    assert service.web is not None
    url = service.web.url.rstrip("/")
    alice = get_client(url=url, api_key=None, headers=ALICE)
    bob = get_client(url=url, api_key=None, headers=BOB)
    stranger = get_client(url=url, api_key=None, headers={})
    try:
        await alice.store.put_item(("notes",), "k", {"who": "alice"})
        await bob.store.put_item(("notes",), "k", {"who": "bob"})

        mine = await alice.store.get_item(("notes",), "k")
        assert mine is not None and mine["value"] == {"who": "alice"}
        assert mine["namespace"] == ["alice", "notes"]
        found = (await bob.store.search_items(("notes",)))["items"]
        assert [i["value"] for i in found] == [{"who": "bob"}]
        assert (await alice.store.list_namespaces())["namespaces"] == [["alice", "notes"]]

        await alice.store.delete_item(("notes",), "k")
        assert await alice.store.get_item(("notes",), "k") is None
        theirs = await bob.store.get_item(("notes",), "k")
        assert theirs is not None and theirs["value"] == {"who": "bob"}

        with pytest.raises(httpx.HTTPStatusError) as refused:
            await stranger.store.get_item(("notes",), "k")
        assert refused.value.response.status_code == 401
    finally:
        for client in (alice, bob, stranger):
            await client.http.client.aclose()
