"""Semantic search in the store (decision 350): with a langgraph.json's `store.index`
naming a deterministic embedding function (a file beside it), the same puts and
queries give the same ranking and scores on turnkeeper (both backends; on
PostgreSQL both pgvector and the plain scan), on LangGraph's InMemoryStore with
the same index config, and on `langgraph dev` serving the same langgraph.json;
through the SDK (`client.store.*`), the client's RemoteStore, and a hosted
graph's `runtime.store.asearch(query=...)`."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.store.base import IndexConfig
from langgraph.store.memory import InMemoryStore
from langgraph_sdk import get_client
from psycopg.conninfo import make_conninfo
from turnkeeper._connection import ConnectionOptions
from turnkeeper.agent._store import RemoteStore
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.engine.store_index import index_of_config

from tests.support import reference
from tests.support.langgraph_host import hosted
from tests.support.nats import NatsServer
from tests.support.postgres import database_of
from tests.support.service import ServiceFactory

# Letter counts: deterministic, and texts sharing letters score near each other.
EMBED = """
def embed(texts):
    return [[float(t.lower().count(c)) for c in "abcdefghijklmnopqrstuvwxyz"] for t in texts]
"""
INDEX = {"embed": "./embed.py:embed", "dims": 26, "fields": ["text"]}
MEMORY_GRAPH = Path(__file__).resolve().parent / "graphs" / "memory.py"
# A graph that recalls by meaning: `runtime.store.asearch(query=...)` in a node.
RECALL_GRAPH = """
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict


class State(TypedDict, total=False):
    user: str
    ask: str
    recalled: list


async def recall(state, runtime):
    found = await runtime.store.asearch(("users", state["user"]), query=state["ask"], limit=2)
    return {"recalled": [[f.key, round(f.score, 6)] for f in found]}


builder = StateGraph(State)
builder.add_node("recall", recall)
builder.add_edge(START, "recall")
builder.add_edge("recall", END)
graph = builder.compile()
"""

# (namespace, key, value, index): index None is the configured fields.
ITEMS: list[tuple[tuple[str, ...], str, dict[str, Any], Any]] = [
    (("users", "alice", "memories"), "m1", {"text": "likes green tea", "n": 1}, None),
    (("users", "alice", "memories"), "m2", {"text": "has a black cat", "n": 2}, None),
    (("users", "alice", "memories"), "m3", {"text": "plays chess on tuesdays", "n": 3}, None),
    (("users", "alice", "prefs"), "theme", {"text": "a dark theme", "n": 4}, None),
    (("users", "bob", "memories"), "m1", {"text": "likes coffee", "n": 5}, None),
    (("users", "bob", "memories"), "m2", {"note": "no text field", "n": 6}, None),
    (("docs",), "d1", {"text": "about cats", "tags": ["kitten", "pets"]}, ["tags[*]"]),
    (("docs",), "d2", {"text": "tea ceremony"}, False),
]
# (namespace_prefix, query, filter, limit, offset)
QUERIES: list[tuple[tuple[str, ...], str, dict[str, Any] | None, int, int]] = [
    (("users",), "tea", None, 10, 0),
    (("users", "alice"), "cat", None, 2, 0),
    (("users", "alice"), "cat", None, 2, 1),
    ((), "kittens and pets", None, 10, 0),
    (("users",), "coffee", {"n": {"$gt": 2}}, 10, 0),
    ((), "tea", None, 4, 5),
    (("nobody",), "tea", None, 10, 0),
]


def _project(root: Path) -> Path:
    """A langgraph.json with the index, and its embedding file beside it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "embed.py").write_text(EMBED)
    shutil.copy(MEMORY_GRAPH, root / "memory.py")
    (root / "recall.py").write_text(RECALL_GRAPH)
    config = {
        "dependencies": ["."],
        "graphs": {"memory": "./memory.py:graph", "recall": "./recall.py:graph"},
        "store": {"index": INDEX},
    }
    (root / "langgraph.json").write_text(json.dumps(config))
    return root / "langgraph.json"


def _embed_fn(root: Path) -> Callable[[Sequence[str]], list[list[float]]]:
    spec = importlib.util.spec_from_file_location("semantic_embed", root / "embed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.embed  # type: ignore[no-any-return]


Answer = tuple[list[tuple[tuple[str, ...], str, float]], set[tuple[tuple[str, ...], str]]]


def _answer(items: Sequence[Mapping[str, Any]]) -> Answer:
    """The ranked items in order (score to 6 places), and the unscored ones that
    fill the page as a set (their order is each store's own: newest first here,
    insertion order in InMemoryStore)."""
    ranked = [
        (tuple(i["namespace"]), i["key"], round(i["score"], 6))
        for i in items
        if i["score"] is not None
    ]
    rest = {(tuple(i["namespace"]), i["key"]) for i in items if i["score"] is None}
    assert all(i["score"] is not None for i in items[: len(ranked)]), "ranked come first"
    return ranked, rest


async def _reference_answers(root: Path) -> list[Answer]:
    store = InMemoryStore(index=IndexConfig(dims=26, embed=_embed_fn(root), fields=["text"]))
    for namespace, key, value, index in ITEMS:
        await store.aput(namespace, key, value, index=index)
    answers = []
    for prefix, query, filter_, limit, offset in QUERIES:
        found = await store.asearch(prefix, query=query, filter=filter_, limit=limit, offset=offset)
        answers.append(_answer([f.dict() for f in found]))
    return answers


async def _sdk_answers(url: str) -> list[Answer]:
    client = get_client(url=url, api_key=None)
    try:
        for namespace, key, value, index in ITEMS:
            await client.store.put_item(namespace, key, value, index=index)
        answers = []
        for prefix, query, filter_, limit, offset in QUERIES:
            found = await client.store.search_items(
                prefix, query=query, filter=filter_, limit=limit, offset=offset
            )
            answers.append(_answer(found["items"]))
        return answers
    finally:
        await client.http.client.aclose()


def _url(service: TurnkeeperServer) -> str:
    assert service.web is not None
    return service.web.url.rstrip("/")


@pytest.fixture
async def indexed(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> TurnkeeperServer:
    return await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        langgraph_config=_project(tmp_path / "app"),
    )


@pytest.mark.both_backends
async def test_queries_rank_as_langgraphs_in_memory_store(
    indexed: TurnkeeperServer, backend: str, tmp_path: Path
) -> None:
    want = await _reference_answers(tmp_path / "app")
    assert any(ranked for ranked, _ in want) and any(rest for _, rest in want)
    assert await _sdk_answers(_url(indexed)) == want
    store = indexed.engine.store
    # PostgreSQL: pgserver ships pgvector, so the service scores in SQL; the plain
    # scan (where the extension is missing) answers the same.
    assert store.pgvector is (backend == "postgres")
    if store.pgvector:
        store.pgvector = False
        client = get_client(url=_url(indexed), api_key=None)
        try:
            for (prefix, query, filter_, limit, offset), expected in zip(
                QUERIES, want, strict=True
            ):
                found = await client.store.search_items(
                    prefix, query=query, filter=filter_, limit=limit, offset=offset
                )
                assert _answer(found["items"]) == expected
        finally:
            await client.http.client.aclose()


@pytest.mark.both_backends
async def test_a_graphs_remote_store_queries_the_index(
    indexed: TurnkeeperServer, tmp_path: Path
) -> None:
    """RemoteStore (a hosted graph's `runtime.store`): puts with their `index`,
    searches with a query and their score, over StoreService."""
    want = await _reference_answers(tmp_path / "app")
    remote = RemoteStore(ConnectionOptions(target=indexed.address))
    try:
        for namespace, key, value, index in ITEMS:
            await remote.aput(namespace, key, value, index=index)
        got = []
        for prefix, query, filter_, limit, offset in QUERIES:
            found = await remote.asearch(
                prefix, query=query, filter=filter_, limit=limit, offset=offset
            )
            got.append(_answer([f.dict() for f in found]))
        assert got == want
        # A put that re-indexes nothing drops the item's vectors: no longer ranked.
        await remote.aput(("users", "alice", "memories"), "m1", {"text": "tea"}, index=False)
        found = await remote.asearch(("users", "alice", "memories"), query="tea", limit=3)
        assert [(f.key, f.score is None) for f in found][-1] == ("m1", True)
        # A search without a query is not ranked.
        plain = await remote.asearch(("users",), limit=3)
        assert plain and all(f.score is None for f in plain)
    finally:
        await remote.aclose()


async def _graph_recalls(url: str) -> list[Any]:
    """What the recall graph answers (a query in a node) after the SDK's puts."""
    client = get_client(url=url, api_key=None)
    try:
        for namespace, key, value, index in ITEMS:
            await client.store.put_item(namespace, key, value, index=index)
        answers = []
        for ask in ("tea", "a black cat"):
            out = await client.runs.wait(None, "recall", input={"user": "alice", "ask": ask})
            assert isinstance(out, dict), out
            answers.append(out["recalled"])
        return answers
    finally:
        await client.http.client.aclose()


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_the_same_langgraph_json_ranks_the_same_on_langgraph_dev(
    indexed: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> None:
    """The SDK's queries, and a query inside a graph (`runtime.store.asearch`), on
    `langgraph dev` and on turnkeeper (the graph hosted by `turnkeeper agent`)."""
    reference.require_reference()
    app = _project(tmp_path / "reference").parent
    async with reference.langgraph_dev(app) as url:
        want = await _sdk_answers(url)
        recalled = await _graph_recalls(url)
    assert await _sdk_answers(_url(indexed)) == want
    # Inside a graph: the hosted graph's runtime.store (RemoteStore) ranks the same.
    async with hosted(
        tmp_path / "app" / "langgraph.json", indexed, nats_server, replica="recall-1"
    ):
        assert await _graph_recalls(_url(indexed)) == recalled
    assert recalled[1][0][0] == "m2" and all(len(r) == 2 for r in recalled)


@pytest.mark.postgres_only
async def test_without_pgvector_postgresql_scans_and_ranks_the_same(
    make_service: ServiceFactory,
    nats_server: NatsServer,
    database_url: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A database role that may not CREATE EXTENSION (pgvector is not a trusted
    extension): the service starts, says so, and answers queries by a plain scan."""
    role = f"plain_{tmp_path.name[-12:].lower().replace('-', '_')}"
    database = database_of(database_url)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"ALTER DATABASE {database} OWNER TO {role}")
        conn.execute(f"ALTER SCHEMA public OWNER TO {role}")
    service = await make_service(
        nats_url=nats_server.url,
        http_listen="127.0.0.1:0",
        langgraph_config=_project(tmp_path / "app"),
        database_url=make_conninfo(database_url, user=role),
    )
    assert service.engine.store.pgvector is False
    assert "pgvector is not available" in caplog.text
    want = await _reference_answers(tmp_path / "app")
    assert await _sdk_answers(_url(service)) == want


def test_a_bad_index_config_says_what_to_write(tmp_path: Path) -> None:
    config = tmp_path / "langgraph.json"
    for index, message in [
        ({"dims": 3}, "embed must name an embedding function"),
        ({"embed": "./embed.py:embed"}, "dims must be"),
        ({"embed": "./embed.py:embed", "dims": 3, "fields": "text"}, "fields must be a list"),
        ({"embed": "./missing.py:embed", "dims": 3}, "does not exist"),
        ({"embed": "./embed.py:nothing", "dims": 3}, r"embed\.py has no attribute 'nothing'"),
        ({"embed": "./embed.py:SIZE", "dims": 3}, "names no embedding function"),
    ]:
        (tmp_path / "embed.py").write_text(EMBED + "SIZE = 3\n")
        config.write_text(json.dumps({"store": {"index": index}}))
        with pytest.raises(ValueError, match=message):
            index_of_config(config)
    config.write_text(json.dumps({"store": {}}))
    assert index_of_config(config) is None


async def test_an_embedding_of_the_wrong_size_is_refused(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    config = _project(tmp_path / "app")
    data = json.loads(config.read_text())
    data["store"]["index"]["dims"] = 8
    config.write_text(json.dumps(data))
    service = await make_service(
        nats_url=nats_server.url, http_listen="127.0.0.1:0", langgraph_config=config
    )
    with pytest.raises(RuntimeError, match="returned a vector of 26 numbers where"):
        await service.engine.store.put(("a",), "k", {"text": "tea"})
    assert await service.engine.store.get(("a",), "k") is None
