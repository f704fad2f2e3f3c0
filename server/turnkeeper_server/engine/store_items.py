"""The engine's store: LangGraph's long-term memory (journal/store_items.py)
committed through the service's store, with a langgraph.json's `store.ttl`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.store.base import GetOp, ListNamespacesOp, PutOp, SearchOp

from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal import store_items, transitions
from turnkeeper_server.journal.store_items import StoreItem
from turnkeeper_server.records import Fence
from turnkeeper_server.store.contract import Store, Tx

Op = GetOp | PutOp | SearchOp | ListNamespacesOp
Result = StoreItem | list[StoreItem] | list[tuple[str, ...]] | None
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
    def __init__(self, db: Store, ttl: TtlConfig | None = None) -> None:
        self.db = db
        self.ttl = ttl or TtlConfig()

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
    ) -> None:
        """Write the item; `ttl` None takes the configured default unless
        `use_default_ttl` is False."""
        minutes = ttl if ttl is not None or not use_default_ttl else self.ttl.default_ttl

        def op(tx: Tx) -> None:
            now = time.time()
            store_items.sweep(tx, now)
            store_items.put(tx, namespace, key, value, now, minutes)

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
    ) -> list[StoreItem]:
        found = await self.db.read(
            lambda conn: store_items.search(conn, prefix, filters, limit, offset, time.time())
        )
        if self._refresh(refresh_ttl) and any(i.ttl_minutes is not None for i in found):
            await self.db.write(lambda tx: store_items.refresh(tx, found, time.time()))
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
                    results.append(None)
                elif isinstance(one, SearchOp):
                    if one.query:
                        raise InvalidArgument(NO_INDEX)
                    found = store_items.search(
                        tx.conn,
                        one.namespace_prefix,
                        [one.filter or {}],
                        one.limit,
                        one.offset,
                        now,
                    )
                    if self._refresh(one.refresh_ttl):
                        store_items.refresh(tx, found, now)
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
