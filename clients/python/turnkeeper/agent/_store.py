"""LangGraph's store (``BaseStore``) kept by the turnkeeper service: what
``get_store()`` and ``runtime.store`` answer inside a graph a turnkeeper agent hosts,
the same items the LangGraph API serves as ``client.store.*``. A ``search`` with a
``query`` is ranked by the service's index (the langgraph.json's ``store.index``),
each item with its ``score``; a put's ``index`` says what of it is embedded.

Each ``batch``/``abatch`` is one StoreBatch call (one transaction on the service).
Inside a turn (a run whose config carries the turn's id and attempt, as the bridge
runs them), the batch carries that fence: once the attempt is stale (the turn was
re-driven to another replica, or cancelled), its writes are refused with
``StaleAttempt`` and nothing of it is stored, as a checkpoint of it would be.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from datetime import UTC, datetime

from langgraph.config import get_config
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)

from turnkeeper._connection import ConnectionOptions
from turnkeeper.agent.saver._channels import Channels
from turnkeeper.agent.saver._identity import turn_identity
from turnkeeper.v1 import checkpoints_pb2, store_pb2


def _fence() -> checkpoints_pb2.TurnFence | None:
    try:
        config = get_config()
    except RuntimeError:  # outside a run
        return None
    identity = turn_identity(config)
    if identity is None:
        return None
    return checkpoints_pb2.TurnFence(turn_id=identity.turn_id, attempt=identity.attempt)


def _operation(op: Op) -> store_pb2.StoreOperation:
    if isinstance(op, GetOp):
        get = store_pb2.StoreGet(namespace=list(op.namespace), key=op.key)
        if op.refresh_ttl is not None:
            get.refresh_ttl = op.refresh_ttl
        return store_pb2.StoreOperation(get=get)
    if isinstance(op, PutOp):
        put = store_pb2.StorePut(namespace=list(op.namespace), key=op.key)
        if op.value is not None:
            put.value_json = json.dumps(op.value)
        if op.ttl is not None:
            put.ttl_minutes = op.ttl
        if op.index is not None:
            # False: no paths, the item is not embedded.
            put.index.CopyFrom(store_pb2.StoreIndexPaths(paths=list(op.index or ())))
        return store_pb2.StoreOperation(put=put)
    if isinstance(op, SearchOp):
        search = store_pb2.StoreSearch(
            namespace_prefix=list(op.namespace_prefix),
            filter_json=json.dumps(op.filter) if op.filter else "",
            limit=op.limit,
            offset=op.offset,
            query=op.query or "",
        )
        if op.refresh_ttl is not None:
            search.refresh_ttl = op.refresh_ttl
        return store_pb2.StoreOperation(search=search)
    if isinstance(op, ListNamespacesOp):
        listing = store_pb2.StoreListNamespaces(
            match_conditions=[
                store_pb2.StoreMatchCondition(match_type=c.match_type, path=list(c.path))
                for c in op.match_conditions or ()
            ],
            limit=op.limit,
            offset=op.offset,
        )
        if op.max_depth is not None:
            listing.max_depth = op.max_depth
        return store_pb2.StoreOperation(list_namespaces=listing)
    raise TypeError(f"not a store operation: {type(op).__name__}")


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def _item(message: store_pb2.StoreItem) -> Item:
    return Item(
        namespace=tuple(message.namespace),
        key=message.key,
        value=json.loads(message.value_json),
        created_at=_time(message.created_at),
        updated_at=_time(message.updated_at),
    )


def _search_item(message: store_pb2.StoreItem) -> SearchItem:
    return SearchItem(
        namespace=tuple(message.namespace),
        key=message.key,
        value=json.loads(message.value_json),
        created_at=_time(message.created_at),
        updated_at=_time(message.updated_at),
        score=message.score if message.HasField("score") else None,
    )


def _result(op: Op, message: store_pb2.StoreResult) -> Result:
    if isinstance(op, GetOp):
        return _item(message.items[0]) if message.items else None
    if isinstance(op, SearchOp):
        return [_search_item(m) for m in message.items]
    if isinstance(op, ListNamespacesOp):
        return [tuple(n.labels) for n in message.namespaces]
    return None


class RemoteStore(BaseStore):
    """A LangGraph ``BaseStore`` kept by the turnkeeper service (StoreService)."""

    supports_ttl = True

    def __init__(self, options: ConnectionOptions | None = None) -> None:
        options = options if options is not None else ConnectionOptions()
        self.options = dataclasses.replace(options)
        self._channels = Channels(self.options)

    def _request(self, ops: list[Op]) -> store_pb2.StoreBatchRequest:
        request = store_pb2.StoreBatchRequest(operations=[_operation(op) for op in ops])
        fence = _fence()
        if fence is not None:
            request.fence.CopyFrom(fence)
        return request

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        listed = list(ops)
        response = self._channels.sync().store_batch(self._request(listed))
        return [_result(op, r) for op, r in zip(listed, response.results, strict=True)]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        listed = list(ops)
        response = await self._channels.aio().store_batch(self._request(listed))
        return [_result(op, r) for op, r in zip(listed, response.results, strict=True)]

    async def aclose(self) -> None:
        for client in self._channels.close():
            await client.close()
