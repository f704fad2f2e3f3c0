"""The engine's store: LangGraph's long-term memory (journal/store_items.py)
committed through the service's store, with a langgraph.json's `store.ttl` and
`store.index` (engine/store_index.py). Embeddings are computed before the
transaction that stores them (the embedding function may call out), one call
for every text of a batch; a query's vector likewise."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from turnkeeper_server.engine.store_index import IndexConfig
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal import store_items, transitions
from turnkeeper_server.journal.store_items import StoreItem
from turnkeeper_server.records import Fence
from turnkeeper_server.store.contract import Conn, Store, Tx

log = logging.getLogger(__name__)

Op = GetOp | PutOp | SearchOp | ListNamespacesOp
# A search answers items with their score (None: not ranked by a query).
Scored = list[tuple[StoreItem, float | None]]
Result = StoreItem | Scored | list[tuple[str, ...]] | None
NO_INDEX = (
    "semantic search (query) needs a store index, which this server does not "
    "configure: search without a query, with a filter instead"
)


@dataclass(frozen=True)
class TtlConfig:
    """`store.ttl` of a langgraph.json, as LangGraph's server reads it: whether a
    read refreshes an item's expiry unless the call says, and the ttl (minutes) of
    an item put without one (None: it never expires)."""

    refresh_on_read: bool = True
    default_ttl: float | None = None


def ttl_of_config(config: Path | None) -> TtlConfig:
    """The `store.ttl` of a langgraph.json (none: LangGraph's defaults)."""
    if config is None:
        return TtlConfig()
    data = json.loads(config.read_text(encoding="utf-8"))
    store = data.get("store") if isinstance(data, dict) else None
    ttl = store.get("ttl") if isinstance(store, dict) else None
    if not isinstance(ttl, dict):
        return TtlConfig()
    default = ttl.get("default_ttl")
    if default is not None and (
        isinstance(default, bool) or not isinstance(default, int | float) or default <= 0
    ):
        raise ValueError(f"{config}: store.ttl.default_ttl must be a positive number of minutes")
    return TtlConfig(
        refresh_on_read=bool(ttl.get("refresh_on_read", True)),
        default_ttl=None if default is None else float(default),
    )


class StoreItems:
    def __init__(
        self, db: Store, ttl: TtlConfig | None = None, index: IndexConfig | None = None
    ) -> None:
        self.db = db
        self.ttl = ttl or TtlConfig()
        self.index = index
        # Whether a query is scored by PostgreSQL's pgvector (`prepare` finds out).
        self.pgvector = False

    async def prepare(self) -> None:
        """With an index on PostgreSQL, use pgvector if the extension is or can be
        installed (CREATE EXTENSION IF NOT EXISTS vector); a plain scan otherwise,
        said in the log. SQLite always scans."""
        if self.index is None or self.db.kind != "postgres":
            return

        def install(tx: Tx) -> None:
            tx.execute("CREATE EXTENSION IF NOT EXISTS vector")
            tx.execute("SELECT '[1]'::vector")

        def check(tx: Tx) -> None:
            tx.execute("SELECT '[1]'::vector")

        self.pgvector = False
        try:
            await self.db.write(install)
        except Exception as exc:
            # Another replica installing it at the same moment, or no right to: it
            # may be there all the same.
            try:
                await self.db.write(check)
            except Exception:
                log.warning("pgvector is not available (%s): store queries scan in Python", exc)
                return
        self.pgvector = True

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        if not texts or self.index is None:
            return []
        return self.index.checked(await self.index.embeddings.aembed_documents(texts))

    async def _query(self, query: str) -> list[float]:
        if self.index is None:
            raise InvalidArgument(NO_INDEX)
        return self.index.checked([await self.index.embeddings.aembed_query(query)])[0]

    async def _vectors(
        self, puts: Sequence[tuple[Mapping[str, Any] | None, Any]]
    ) -> list[list[tuple[str, list[float]]]]:
        """For each (value, index) of a put: its (path, vector) pairs, embedded in
        one call."""
        if self.index is None:
            return [[] for _ in puts]
        texts = [self.index.texts(v, i) if v is not None else [] for v, i in puts]
        flat = await self._embed([t for each in texts for _, t in each])
        out: list[list[tuple[str, list[float]]]] = []
        at = 0
        for each in texts:
            out.append([(path, flat[at + n]) for n, (path, _) in enumerate(each)])
            at += len(each)
        return out

    def _search(
        self,
        conn: Conn,
        prefix: Sequence[str],
        filters: Sequence[Mapping[str, Any]],
        limit: int,
        offset: int,
        query: list[float] | None,
        now: float,
    ) -> Scored:
        if query is None:
            found = store_items.search(conn, prefix, filters, limit, offset, now)
            return [(i, None) for i in found]
        scoring = store_items.scores_pgvector if self.pgvector else store_items.scores
        if any(filters):
            # Only the items matching the filter compete: read them all.
            items = store_items.matching(conn, prefix, filters, now)
            if not items:
                return []
            return store_items.ranked(items, scoring(conn, prefix, query), limit, offset)
        # No filter: rank the vectors, then read only the items on the page.
        return store_items.ranked_by_key(
            conn, prefix, scoring(conn, prefix, query), limit, offset, now
        )

    def _refresh(self, refresh_ttl: bool | None) -> bool:
        return self.ttl.refresh_on_read if refresh_ttl is None else refresh_ttl

    async def put(
        self,
        namespace: Sequence[str],
        key: str,
        value: Mapping[str, Any],
        ttl: float | None = None,
        *,
        use_default_ttl: bool = True,
        index: Sequence[str] | Literal[False] | None = None,
    ) -> None:
        """Write the item; `ttl` None takes the configured default unless
        `use_default_ttl` is False. `index`: the paths to embed (None: the
        configured fields, False: none)."""
        minutes = ttl if ttl is not None or not use_default_ttl else self.ttl.default_ttl
        (vectors,) = await self._vectors([(value, index)])

        def op(tx: Tx) -> None:
            now = time.time()
            store_items.sweep(tx, now)
            store_items.put(tx, namespace, key, value, now, minutes)
            store_items.put_vectors(tx, namespace, key, vectors)

        await self.db.write(op)

    async def get(
        self, namespace: Sequence[str], key: str, refresh_ttl: bool | None = None
    ) -> StoreItem | None:
        if not self._refresh(refresh_ttl):
            return await self.db.read(
                lambda conn: store_items.read(conn, namespace, key, time.time())
            )
        return await self.db.write(
            lambda tx: store_items.get(tx, namespace, key, time.time(), refresh=True)
        )

    async def delete(self, namespace: Sequence[str], key: str) -> None:
        await self.db.write(lambda tx: store_items.delete(tx, namespace, key))

    async def search(
        self,
        prefix: Sequence[str],
        filters: Sequence[Mapping[str, Any]],
        limit: int,
        offset: int,
        refresh_ttl: bool | None = None,
        query: str | None = None,
    ) -> Scored:
        """Items under `prefix` matching `filters`, newest first; with a `query`,
        ranked by similarity (InvalidArgument without an index)."""
        vector = await self._query(query) if query else None
        found = await self.db.read(
            lambda conn: self._search(conn, prefix, filters, limit, offset, vector, time.time())
        )
        items = [i for i, _ in found]
        if self._refresh(refresh_ttl) and any(i.ttl_minutes is not None for i in items):
            await self.db.write(lambda tx: store_items.refresh(tx, items, time.time()))
        return found

    async def list_namespaces(
        self,
        prefix: Sequence[str] | None,
        suffix: Sequence[str] | None,
        max_depth: int | None,
        limit: int,
        offset: int,
    ) -> list[tuple[str, ...]]:
        conditions: list[tuple[str, Sequence[str]]] = []
        if prefix:
            conditions.append(("prefix", prefix))
        if suffix:
            conditions.append(("suffix", suffix))
        return await self.db.read(
            lambda conn: store_items.list_namespaces(
                conn, conditions, max_depth, limit, offset, time.time()
            )
        )

    async def batch(self, ops: Sequence[Op], fence: Fence | None) -> list[Result]:
        """BaseStore.batch in one transaction, in order. With a fence, the batch is
        refused (StaleAttempt) unless the attempt is its turn's current one, checked
        with the turn locked in the transaction that writes (as checkpoints are)."""
        puts = [o for o in ops if isinstance(o, PutOp)]
        vectors = dict(
            zip(
                (id(o) for o in puts),
                await self._vectors([(o.value, o.index) for o in puts]),
                strict=True,
            )
        )
        queries = {
            o.query: await self._query(o.query) for o in ops if isinstance(o, SearchOp) and o.query
        }

        def op(tx: Tx) -> list[Result]:
            now = time.time()
            if fence is not None:
                transitions.fence(transitions.lock_turn(tx, fence.turn_id), fence.attempt)
            results: list[Result] = []
            swept = False
            for one in ops:
                if isinstance(one, GetOp):
                    results.append(
                        store_items.get(
                            tx, one.namespace, one.key, now, refresh=self._refresh(one.refresh_ttl)
                        )
                    )
                elif isinstance(one, PutOp):
                    if not swept:
                        store_items.sweep(tx, now)
                        swept = True
                    if one.value is None:
                        store_items.delete(tx, one.namespace, one.key)
                    else:
                        ttl = one.ttl if one.ttl is not None else self.ttl.default_ttl
                        store_items.put(tx, one.namespace, one.key, one.value, now, ttl)
                        store_items.put_vectors(tx, one.namespace, one.key, vectors[id(one)])
                    results.append(None)
                elif isinstance(one, SearchOp):
                    found = self._search(
                        tx.conn,
                        one.namespace_prefix,
                        [one.filter or {}],
                        one.limit,
                        one.offset,
                        queries[one.query] if one.query else None,
                        now,
                    )
                    if self._refresh(one.refresh_ttl):
                        store_items.refresh(tx, [i for i, _ in found], now)
                    results.append(found)
                else:
                    conditions = [(c.match_type, c.path) for c in one.match_conditions or ()]
                    results.append(
                        store_items.list_namespaces(
                            tx.conn, conditions, one.max_depth, one.limit, one.offset, now
                        )
                    )
            return results

        return await self.db.write(op)
