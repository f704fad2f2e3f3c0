"""The engine's store: LangGraph's long-term memory (journal/store_items.py)
committed through the service's store, with a langgraph.json's `store.ttl`."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from turnkeeper_server.journal import store_items
from turnkeeper_server.journal.store_items import StoreItem
from turnkeeper_server.store.contract import Store, Tx


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
        return await self.db.read(
            lambda conn: store_items.list_namespaces(
                conn, prefix, suffix, max_depth, limit, offset, time.time()
            )
        )
