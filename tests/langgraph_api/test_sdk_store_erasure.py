"""The store with what it belongs to (decision 352): erasing a thread erases the
items under ("threads", <thread id>) with their vectors, and nothing else; and
`turnkeeper backup` copies the store (items and vectors) with the journal, so a
restored service answers the same gets and queries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langgraph_sdk import get_client
from turnkeeper.operator._backup import backup
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.store.contract import Conn

from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

EMBED = """
def embed(texts):
    return [[float(t.count(c)) for c in "aeiou"] for t in texts]
"""


def _config(root: Path) -> Path:
    (root / "embed.py").write_text(EMBED)
    config = root / "langgraph.json"
    index = {"embed": "./embed.py:embed", "dims": 5, "fields": ["text"]}
    config.write_text(json.dumps({"graphs": {}, "store": {"index": index}}))
    return config


async def _counts(service: TurnkeeperServer) -> tuple[int, int]:
    def count(conn: Conn) -> tuple[int, int]:
        items = conn.execute("SELECT count(*) FROM main.store_items").fetchone()[0]
        vectors = conn.execute("SELECT count(*) FROM main.store_vectors").fetchone()[0]
        return int(items), int(vectors)

    return await service.db.read(count)


@pytest.mark.both_backends
async def test_erasing_a_thread_erases_its_memory_and_nothing_else(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    service = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", langgraph_config=_config(tmp_path)
    )
    assert service.web is not None
    client = get_client(url=service.web.url.rstrip("/"), api_key=None)
    try:
        gone, kept = await client.threads.create(), await client.threads.create()
        for thread in (gone, kept):
            tid = thread["thread_id"]
            await client.store.put_item(("threads", tid), "summary", {"text": "a talk"})
            await client.store.put_item(("threads", tid, "notes"), "n1", {"text": "a note"})
        await client.store.put_item(("users", "alice"), "m1", {"text": "likes tea"})
        assert await _counts(service) == (5, 5)

        await client.threads.delete(gone["thread_id"])

        assert await _counts(service) == (3, 3)
        assert await client.store.search_items(("threads", gone["thread_id"])) == {"items": []}
        left = await client.store.search_items(("threads", kept["thread_id"]), query="talk")
        assert {i["key"] for i in left["items"]} == {"summary", "n1"}
        assert all(i["score"] is not None for i in left["items"])
        assert await client.store.get_item(("users", "alice"), "m1") is not None
    finally:
        await client.http.client.aclose()


async def test_a_backup_holds_the_store_and_its_index(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    config = _config(tmp_path)
    service = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", langgraph_config=config
    )
    store = service.engine.store
    await store.put(("users", "alice"), "m1", {"text": "likes tea"})
    await store.put(("users", "alice"), "m2", {"text": "owns a boat"})
    want = await store.search(("users",), [], 10, 0, query="boat")
    assert [s is not None for _, s in want] == [True, True]

    dest = tmp_path / "backup"
    backup(tmp_path / "turns.db", tmp_path / "sessions.db", dest)
    await service.stop(0)

    restored = await make_service(
        nats_url=nats_server.url,
        turns_path=dest / "turns.db",
        sessions_path=dest / "sessions.db",
        langgraph_config=config,
    )
    assert await _counts(restored) == (2, 2)
    got = await restored.engine.store.search(("users",), [], 10, 0, query="boat")
    assert [(i.key, s) for i, s in got] == [(i.key, s) for i, s in want]
