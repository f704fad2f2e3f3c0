"""StoreService: LangGraph's store (BaseStore.batch) for graphs hosted by turnkeeper
agents (the client's remote store), over the engine's store (engine/store_items.py).

Who may call it: agents (their graphs' memory), operators and admins (decision
315). A fenced batch names a turn the caller may see (an agent: its own agent's),
and is refused once that attempt is not the turn's current one (decision 317).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from grpc import aio
from langgraph.store.base import GetOp, ListNamespacesOp, MatchCondition, PutOp, SearchOp
from turnkeeper.v1 import store_pb2, store_pb2_grpc

from turnkeeper_server import limits as lim
from turnkeeper_server.engine import Engine
from turnkeeper_server.engine.store_items import Op, Result
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.journal.store_items import StoreItem
from turnkeeper_server.limits import Limits
from turnkeeper_server.records import Fence
from turnkeeper_server.security import auth

Ctx = aio.ServicerContext[object, object]

MAX_OPERATIONS = 1000
MAX_KEY_CHARS = 1024
MAX_PAGE = 10_000


def _namespace(labels: Sequence[str], what: str = "namespace") -> tuple[str, ...]:
    for label in labels:
        if not label or "." in label:
            raise InvalidArgument(
                f"{what} label {label!r} must be a non-empty string without periods"
            )
    return tuple(labels)


def _key(key: str) -> str:
    if not key or len(key) > MAX_KEY_CHARS:
        raise InvalidArgument(f"key must be 1 to {MAX_KEY_CHARS} characters")
    return key


def _json_object(text: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"{what} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{what} must be a JSON object")
    return value


def _page(limit: int, offset: int) -> tuple[int, int]:
    if not 0 <= limit <= MAX_PAGE or offset < 0:
        raise InvalidArgument(f"limit must be 0 to {MAX_PAGE} and offset not negative")
    return limit, offset


def operation(message: store_pb2.StoreOperation) -> Op:
    """A BaseStore operation from its message, checked."""
    kind = message.WhichOneof("operation")
    if kind == "get":
        get = message.get
        return GetOp(
            _namespace(get.namespace),
            _key(get.key),
            refresh_ttl=get.refresh_ttl if get.HasField("refresh_ttl") else None,  # type: ignore[arg-type]
        )
    if kind == "put":
        put = message.put
        value = _json_object(put.value_json, "value_json") if put.HasField("value_json") else None
        ttl = put.ttl_minutes if put.HasField("ttl_minutes") else None
        if ttl is not None and not ttl > 0:
            raise InvalidArgument("ttl_minutes must be positive")
        if not put.namespace:
            raise InvalidArgument("namespace must not be empty")
        index: list[str] | None = None
        if put.HasField("index"):
            if any(not p for p in put.index.paths):
                raise InvalidArgument("index paths must not be empty")
            index = list(put.index.paths)
        return PutOp(
            _namespace(put.namespace),
            _key(put.key),
            value,
            # No paths: not embedded (LangGraph's index=False).
            index=index if index else (False if index is not None else None),
            ttl=ttl,
        )
    if kind == "search":
        search = message.search
        limit, offset = _page(search.limit, search.offset)
        return SearchOp(
            _namespace(search.namespace_prefix, "namespace_prefix"),
            _json_object(search.filter_json, "filter_json") if search.filter_json else None,
            limit,
            offset,
            search.query or None,
            refresh_ttl=search.refresh_ttl if search.HasField("refresh_ttl") else None,  # type: ignore[arg-type]
        )
    if kind == "list_namespaces":
        listing = message.list_namespaces
        limit, offset = _page(listing.limit, listing.offset)
        conditions = tuple(
            MatchCondition(c.match_type, _path(c.path))  # type: ignore[arg-type]
            for c in listing.match_conditions
        )
        return ListNamespacesOp(
            conditions or None,
            listing.max_depth if listing.HasField("max_depth") else None,
            limit,
            offset,
        )
    raise InvalidArgument("each operation must be a get, put, search or list_namespaces")


def _path(labels: Sequence[str]) -> tuple[str, ...]:
    if any(not label or "." in label for label in labels):
        raise InvalidArgument("a match condition's labels must be non-empty, without periods")
    return tuple(labels)


def _item(item: StoreItem, score: float | None = None) -> store_pb2.StoreItem:
    message = store_pb2.StoreItem(
        namespace=list(item.namespace),
        key=item.key,
        value_json=json.dumps(item.value),
        created_at=item.created_at,
        updated_at=item.updated_at,
    )
    if score is not None:
        message.score = score
    return message


def result(value: Result) -> store_pb2.StoreResult:
    if value is None:
        return store_pb2.StoreResult()
    if isinstance(value, StoreItem):
        return store_pb2.StoreResult(items=[_item(value)])
    out = store_pb2.StoreResult()
    for entry in value:
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], StoreItem):
            out.items.append(_item(entry[0], entry[1]))
        else:
            out.namespaces.append(store_pb2.StoreNamespace(labels=list(entry)))
    return out


class StoreServicer(store_pb2_grpc.StoreServiceServicer):
    def __init__(self, engine: Engine, limits: Limits) -> None:
        self.engine = engine
        self.limits = limits

    async def StoreBatch(
        self, request: store_pb2.StoreBatchRequest, context: Ctx
    ) -> store_pb2.StoreBatchResponse:
        if len(request.operations) > MAX_OPERATIONS:
            raise InvalidArgument(f"a batch holds at most {MAX_OPERATIONS} operations")
        ops = [operation(m) for m in request.operations]
        fence = None
        if request.HasField("fence"):
            turn_id = lim.check_id("fence.turn_id", request.fence.turn_id, self.limits)
            if request.fence.attempt < 0:
                raise InvalidArgument("fence.attempt must not be negative")
            # Another agent's turn is not found (auth.require_turn), as for checkpoints.
            auth.require_turn(turn_id, lambda: self.engine.turns.get(turn_id))
            fence = Fence(turn_id, request.fence.attempt)
        results = await self.engine.store.batch(ops, fence)
        return store_pb2.StoreBatchResponse(results=[result(r) for r in results])
