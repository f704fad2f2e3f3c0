"""The store section of `python -m bench`: LangGraph's BaseStore kept by the service
(the client's RemoteStore over StoreService, the service in a process of its own)
against LangGraph's own stores in the caller's process, AsyncSqliteStore and
AsyncPostgresStore, side by side in one run, on each backend.

Per operation, one after the other on one event loop: `put` (a new key each),
`get`, `search` (a filter under a prefix of `store_items` items, limit 10), and a
semantic `query` over the same items with an index of 64 dimensions (a
deterministic embedding function in a file, the same for both sides; the
service's from its langgraph.json): on SQLite the service scores with a plain
scan in Python, compared with InMemoryStore's scan (AsyncSqliteStore's index
needs sqlite-vec loaded as an extension); on PostgreSQL both with
pgvector (the service casts its stored text to `vector`; AsyncPostgresStore keeps
a `vector` column). The variants alternate in rounds; a figure is the median of
all its calls, a ratio the median of the rounds' ratios (decision 163).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres.aio import AsyncPostgresStore
from langgraph.store.sqlite.aio import AsyncSqliteStore
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from turnkeeper._connection import ConnectionOptions
from turnkeeper.agent._store import RemoteStore

from bench.common import Row, Section, Size, fmt_ms, fmt_ratio, median, scratch_dir
from bench.postgres import Replica, postgres

DIMS = 64
EMBED = f'''
import hashlib

def embed(texts):
    """Words hashed into {DIMS} buckets: deterministic, no model."""
    out = []
    for text in texts:
        vector = [0.0] * {DIMS}
        for word in text.lower().split():
            vector[int(hashlib.sha1(word.encode()).hexdigest(), 16) % {DIMS}] += 1.0
        out.append(vector)
    return out
'''
WORDS = [
    "tea",
    "cat",
    "chess",
    "coffee",
    "dark",
    "theme",
    "garden",
    "music",
    "river",
    "book",
    "train",
    "city",
]
OPS = ("put", "get", "search", "query")
ROUNDS = 5


def _project(root: Path) -> tuple[Path, ModuleType]:
    (root / "embed.py").write_text(EMBED)
    config = {
        "graphs": {},
        "store": {"index": {"embed": "./embed.py:embed", "dims": DIMS, "fields": ["text"]}},
    }
    (root / "langgraph.json").write_text(json.dumps(config))
    spec = importlib.util.spec_from_file_location("bench_store_embed", root / "embed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return root / "langgraph.json", module


def _text(n: int) -> str:
    return " ".join(WORDS[(n * k + k) % len(WORDS)] for k in range(1, 5))


async def _fill(store: BaseStore, count: int) -> None:
    for start in range(0, count, 100):
        await asyncio.gather(
            *(
                store.aput(("users", f"u{n % 10}", "memories"), f"m{n}", {"text": _text(n), "n": n})
                for n in range(start, min(count, start + 100))
            )
        )


async def _timed(
    store: BaseStore, op: str, calls: int, round_: int, out: dict[str, list[float]]
) -> None:
    ns = ("users", "u1", "memories")
    for i in range(calls):
        call: Awaitable[Any]
        if op == "put":
            call = store.aput(ns, f"new-{round_}-{i}", {"text": _text(i), "n": i})
        elif op == "get":
            call = store.aget(ns, f"m{10 * i + 1}")
        elif op == "search":
            call = store.asearch(("users",), filter={"n": {"$gte": i}}, limit=10)
        else:
            call = store.asearch(("users",), query=_text(i + 7), limit=10)
        started = time.perf_counter()
        await call
        out[op].append(time.perf_counter() - started)


async def _compare(
    ours: BaseStore,
    theirs: BaseStore,
    size: Size,
    query_base: BaseStore | None = None,
    ops: tuple[str, ...] = OPS,
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    """Per-call seconds of each side, and each round's ratio (ours / theirs; the
    query's against `query_base` where given)."""
    await _fill(ours, size.store_items)
    await _fill(theirs, size.store_items)
    if query_base is not None:
        await _fill(query_base, size.store_items)
    mine: dict[str, list[float]] = {op: [] for op in ops}
    base: dict[str, list[float]] = {op: [] for op in ops}
    ratios: dict[str, list[float]] = {op: [] for op in ops}
    for round_ in range(ROUNDS):
        for op in ops:
            a: dict[str, list[float]] = {op: []}
            b: dict[str, list[float]] = {op: []}
            other = query_base if op == "query" and query_base is not None else theirs
            order = [(ours, a), (other, b)] if round_ % 2 == 0 else [(other, b), (ours, a)]
            for store, out in order:
                await _timed(store, op, size.store_ops, round_, out)
            mine[op] += a[op]
            base[op] += b[op]
            ratios[op].append(median(a[op]) / median(b[op]))
    return mine, base, ratios


@asynccontextmanager
async def _remote(address: str) -> AsyncIterator[RemoteStore]:
    store = RemoteStore(ConnectionOptions(target=address))
    try:
        yield store
    finally:
        await store.aclose()


async def _sqlite_side(
    root: Path, config: Path, embed: Callable[..., Any], size: Size
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    server = Replica(root / "service-sqlite", None)
    server.data_dir.mkdir()
    server.args = ["--langgraph-config", str(config)]
    server.start()
    try:
        async with AsyncExitStack() as stack:
            ours = await stack.enter_async_context(_remote(server.address))
            # Without an index: its index needs sqlite-vec loaded as an extension,
            # which this Python's sqlite3 may not allow; the query is compared with
            # InMemoryStore's (what `langgraph dev` serves), a scan in Python too.
            theirs = await stack.enter_async_context(
                AsyncSqliteStore.from_conn_string(str(root / "store.db"))
            )
            await theirs.setup()
            await theirs.conn.execute("PRAGMA journal_mode=WAL")
            await theirs.conn.execute("PRAGMA synchronous=FULL")
            memory = InMemoryStore(index={"dims": DIMS, "embed": embed, "fields": ["text"]})
            return await _compare(ours, theirs, size, memory)
    finally:
        server.stop()


def _without_pgvector(database_url: str) -> str:
    """The database's URL for a role that owns it but may not CREATE EXTENSION
    (pgvector is not a trusted extension): the service then scans."""
    database = conninfo_to_dict(database_url)["dbname"]
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE ROLE plain_scan LOGIN")
        conn.execute(f"ALTER DATABASE {database} OWNER TO plain_scan")
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("ALTER SCHEMA public OWNER TO plain_scan")
    return make_conninfo(database_url, user="plain_scan")


async def _postgres_side(
    root: Path,
    config: Path,
    embed: Callable[..., Any],
    size: Size,
    new_database: Callable[[], str],
    pgvector: bool = True,
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, list[float]]]:
    url = new_database()
    server = Replica(
        root / f"service-postgres-{pgvector}", url if pgvector else _without_pgvector(url)
    )
    server.data_dir.mkdir()
    server.args = ["--langgraph-config", str(config)]
    server.start()
    try:
        async with AsyncExitStack() as stack:
            ours = await stack.enter_async_context(_remote(server.address))
            theirs = await stack.enter_async_context(
                AsyncPostgresStore.from_conn_string(
                    new_database(), index={"dims": DIMS, "embed": embed, "fields": ["text"]}
                )
            )
            await theirs.setup()
            return await _compare(ours, theirs, size, ops=OPS if pgvector else ("query",))
    finally:
        server.stop()


LABELS = {
    "put": "put (a new key)",
    "get": "get",
    "search": "search, a filter, limit 10",
    "query": "semantic query, limit 10",
}


def run(size: Size) -> Section:
    section = Section(
        key="store",
        title="The store: RemoteStore vs LangGraph's in-process stores",
        method=(
            f"{size.store_items} items in 10 namespaces, then {ROUNDS} alternated rounds of "
            f"{size.store_ops} calls of each operation on each side, one after the other "
            "(`aput`, `aget`, `asearch` with a filter, `asearch` with a query). "
            + (__doc__ or "").split("\n\n")[1].replace("\n", " ")
        ),
    )
    with scratch_dir("store") as root:
        config, module = _project(root)
        sides = {"SQLite": asyncio.run(_sqlite_side(root, config, module.embed, size))}
        # The smoke run stays tiny: no PostgreSQL cluster (bench.postgres has its own).
        if size.name != "smoke":
            with postgres() as new_database:
                sides["PostgreSQL"] = asyncio.run(
                    _postgres_side(root, config, module.embed, size, new_database)
                )
                sides["PostgreSQL without pgvector"] = asyncio.run(
                    _postgres_side(root, config, module.embed, size, new_database, False)
                )
    for backend, (mine, base, ratios) in sides.items():
        for op in mine:
            baseline = "AsyncSqliteStore" if backend == "SQLite" else "AsyncPostgresStore"
            if backend == "SQLite" and op == "query":
                baseline = "InMemoryStore"
            section.rows.append(
                Row(
                    f"{backend}: {LABELS[op]}, RemoteStore / {baseline}",
                    fmt_ms(median(mine[op])),
                    fmt_ms(median(base[op])),
                    fmt_ratio(median(ratios[op])),
                )
            )
            key = f"{backend.lower().replace(' ', '_')}_{op}"
            section.metrics[f"{key}_ms"] = median(mine[op]) * 1e3
            section.metrics[f"{key}_baseline_ms"] = median(base[op]) * 1e3
    section.notes.append(
        "RemoteStore crosses a process (a gRPC call per batch, one transaction of the "
        "service's) where LangGraph's stores are a call into a library. A search with "
        "a filter reads the items under its prefix newest first, parsing and matching "
        "each in Python until its page is full (decision 315), where LangGraph's stores "
        "filter in SQL: its cost grows with the items it passes over (here a filter most "
        "items match, on the ~1,500 items under the prefix). The semantic query on "
        "SQLite is the service's plain scan (every vector under the prefix read and "
        "scored in Python), then only the page's items read; the same scan serves "
        "PostgreSQL without pgvector (the service's role may not install it: its row); "
        "on PostgreSQL with pgvector the similarity is computed in SQL, still over every "
        "vector under the prefix (no approximate index; decision 350)."
    )
    return section
