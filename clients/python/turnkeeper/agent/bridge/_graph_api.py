"""What a bridge answers about its graph, for the service's LangGraph API
(docs/langgraph-api.md): the graph's description, and a thread's state and history
read and written through the graph itself, which alone knows its channels, its
next nodes and its pending tasks.

JSON-RPC methods (the relay's rights: describe, state and history are reads;
updateState edits a thread's state, a right of its own that panels do not hold,
decision 283):

``langgraph/describe`` ``{xray?, subgraphs?: {namespace?, recurse?}}``
    ``{assistant_id, graph_id, name, graph: {nodes, edges}, schemas: {...}}``; the
    graph drawn with its subgraphs' nodes with ``xray`` (true or a depth), and with
    ``subgraphs`` the subgraphs' schemas by namespace (``subgraphs: {ns: {...}}``).
``langgraph/state`` ``{thread_id, checkpoint_id?, checkpoint_ns?, subgraphs?}``
    The thread's state as LangGraph's API server answers ``GET /threads/{id}/state``
    (with ``subgraphs``, a subgraph task's own state in its ``state``).
``langgraph/history`` ``{thread_id, limit?, before?, metadata?, checkpoint_id?}``
    Its states, newest first.
``langgraph/updateState`` ``{thread_id, values, as_node?, checkpoint_id?}``
    ``{checkpoint: {thread_id, checkpoint_ns, checkpoint_id}}``; refused while the
    thread has a live or parked turn (the service refuses a write without that
    turn's fence).

Values are JSON the way LangGraph's server writes them (messages with every field:
``to_jsonable(whole=True)``), so a client cannot tell the two servers apart by them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.channels.base import BaseChannel
from langgraph.errors import EmptyChannelError
from langgraph.types import StateSnapshot

from turnkeeper._thread_state import empty_thread_state
from turnkeeper.agent.bridge._convert import response_schema_of, to_jsonable
from turnkeeper.agent.bridge._jsonrpc import Reply, Request, invalid_params
from turnkeeper.agent.bridge._runtime import AnyGraph

DESCRIBE: Final = "langgraph/describe"
STATE: Final = "langgraph/state"
HISTORY: Final = "langgraph/history"
UPDATE_STATE: Final = "langgraph/updateState"
METHODS: Final = (DESCRIBE, STATE, HISTORY, UPDATE_STATE)

MAX_HISTORY: Final = 1000


def state_values(graph: AnyGraph, channel_values: Mapping[str, Any], depth: int = 0) -> Any:
    """The graph's state as its ``values`` stream shows it: the output channels of a
    checkpoint's values (a graph with one root channel: that channel's value), with
    those never written that have a value of their own (a reducer's empty list), as
    LangGraph reads its channels. ``depth``: where the state goes in an event's data
    (``to_jsonable``'s depth, so the event is plain JSON as it is)."""
    channels = graph.stream_channels_asis
    if isinstance(channels, str):
        return to_jsonable(channel_values.get(channels), depth, whole=True)
    values: dict[str, Any] = {}
    for key in channels:
        if key in channel_values:
            values[key] = to_jsonable(channel_values[key], depth + 1, whole=True)
        elif (initial := _initial(graph, key)) is not _NONE:
            values[key] = to_jsonable(initial, depth + 1, whole=True)
    return values


_NONE: Final = object()


def _initial(graph: AnyGraph, key: str) -> Any:
    """A channel's value before its first write (``_NONE``: it has none)."""
    spec = graph.channels.get(key)
    try:
        return spec.copy().get() if isinstance(spec, BaseChannel) else _NONE
    except EmptyChannelError:
        return _NONE


def _checkpoint(config: RunnableConfig | None) -> dict[str, Any] | None:
    if not config:
        return None
    configurable = config.get("configurable", {})
    return {
        "thread_id": configurable.get("thread_id"),
        "checkpoint_ns": configurable.get("checkpoint_ns", ""),
        "checkpoint_id": configurable.get("checkpoint_id"),
        "checkpoint_map": configurable.get("checkpoint_map"),
    }


def _interrupt(value: Any) -> dict[str, Any]:
    return {
        "value": to_jsonable(getattr(value, "value", value), whole=True),
        "id": value.id,
        "response_schema": response_schema_of(value),
    }


def snapshot_json(snapshot: StateSnapshot) -> dict[str, Any]:
    """A StateSnapshot as LangGraph's API server's ThreadState."""
    checkpoint = _checkpoint(snapshot.config)
    parent = _checkpoint(snapshot.parent_config)
    tasks = [
        {
            "id": task.id,
            "name": task.name,
            "path": to_jsonable(task.path),
            "error": None if task.error is None else str(task.error),
            "interrupts": [_interrupt(i) for i in task.interrupts],
            # A subgraph's task: where its state is, or (asked with subgraphs) it.
            "checkpoint": (
                to_jsonable(task.state.get("configurable"))
                if isinstance(task.state, dict) and task.state.get("configurable")
                else None
            ),
            "state": snapshot_json(task.state) if isinstance(task.state, StateSnapshot) else None,
            "result": to_jsonable(task.result, whole=True),
        }
        for task in snapshot.tasks
    ]
    return {
        "values": to_jsonable(snapshot.values, whole=True),
        "next": list(snapshot.next),
        "tasks": tasks,
        "metadata": to_jsonable(snapshot.metadata),
        "created_at": snapshot.created_at,
        "checkpoint": checkpoint,
        "parent_checkpoint": parent,
        "checkpoint_id": checkpoint and checkpoint["checkpoint_id"],
        "parent_checkpoint_id": parent and parent["checkpoint_id"],
        "interrupts": [_interrupt(i) for i in snapshot.interrupts],
    }


def _string(params: Mapping[str, Any], name: str, *, required: bool = False) -> str | None:
    value = params.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value:
        raise invalid_params(f"{name} must be a non-empty string")
    return value


class GraphApi:
    """The ``langgraph/*`` methods of one bridge's graph."""

    def __init__(self, graph: AnyGraph, agent: str, *, input_mapped: bool = False) -> None:
        self.graph = graph
        self.agent = agent
        # The bridge maps its runs' input (an input_mapper): the graph's input schema
        # is not what a run takes. Said as `input_mapped: true` in the schemas.
        self.input_mapped = input_mapped

    def description(self) -> dict[str, Any]:
        return {
            "assistant_id": self.agent,
            "graph_id": self.agent,
            "name": self.agent,
            "graph": self._drawing(),
            "schemas": {
                **self._schemas(),
                **({"input_mapped": True} if self.input_mapped else {}),
            },
        }

    def _drawing(self, xray: int | bool = False) -> dict[str, Any]:
        try:
            drawn = self.graph.get_graph(xray=xray).to_json()
        except Exception as exc:  # a graph that cannot be drawn is still served
            return {"nodes": [], "edges": [], "error": f"{type(exc).__name__}: {exc}"}
        return to_jsonable(drawn)  # type: ignore[no-any-return]

    def _schemas(self) -> dict[str, Any]:
        out: dict[str, Any] = {"graph_id": self.agent}
        readers = {
            "input_schema": "get_input_jsonschema",
            "output_schema": "get_output_jsonschema",
            "context_schema": "get_context_jsonschema",
            "config_schema": "get_config_jsonschema",
        }
        for key, method in readers.items():
            try:
                out[key] = to_jsonable(getattr(self.graph, method)())
            except Exception:
                out[key] = None
        out["state_schema"] = out["output_schema"]
        return out

    def _config(self, thread_id: str, params: Mapping[str, Any]) -> RunnableConfig:
        configurable: dict[str, Any] = {
            "thread_id": thread_id,
            "checkpoint_ns": _string(params, "checkpoint_ns") or "",
        }
        checkpoint_id = _string(params, "checkpoint_id")
        if checkpoint_id:
            configurable["checkpoint_id"] = checkpoint_id
        return {"configurable": configurable}

    async def describe(self, request: Request) -> Reply:
        params = request.params
        described = self.description()
        xray = params.get("xray", False)
        if not isinstance(xray, (bool, int)) or (not isinstance(xray, bool) and xray < 0):
            raise invalid_params("xray must be true, false or a whole number of levels")
        if xray:
            described["graph"] = self._drawing(xray)
        if "subgraphs" in params:
            described["subgraphs"] = await self._subgraphs(params["subgraphs"])
        return Reply(described)

    async def _subgraphs(self, asked: Any) -> dict[str, Any]:
        """The graph's subgraphs by namespace, each with its schemas (LangGraph's
        server's ``GET /assistants/{id}/subgraphs``)."""
        if not isinstance(asked, Mapping):
            raise invalid_params("subgraphs must be an object of namespace and recurse")
        namespace = _string(asked, "namespace")
        recurse = asked.get("recurse", False)
        if not isinstance(recurse, bool):
            raise invalid_params("subgraphs.recurse must be true or false")
        found: dict[str, Any] = {}
        async for ns, subgraph in self.graph.aget_subgraphs(namespace=namespace, recurse=recurse):
            schemas = GraphApi(subgraph, self.agent)._schemas()  # type: ignore[arg-type]
            schemas.pop("graph_id", None)
            found[ns] = schemas
        return found

    async def state(self, request: Request) -> Reply:
        thread_id = _string(request.params, "thread_id", required=True)
        assert thread_id is not None
        subgraphs = request.params.get("subgraphs", False)
        if not isinstance(subgraphs, bool):
            raise invalid_params("subgraphs must be true or false")
        snapshot = await self.graph.aget_state(
            self._config(thread_id, request.params), subgraphs=subgraphs
        )
        if snapshot.config is None or not snapshot.config.get("configurable", {}).get(
            "checkpoint_id"
        ):
            return Reply(empty_thread_state(thread_id))
        return Reply(snapshot_json(snapshot))

    async def history(self, request: Request) -> Reply:
        params = request.params
        thread_id = _string(params, "thread_id", required=True)
        assert thread_id is not None
        limit = params.get("limit", 10)
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_HISTORY:
            raise invalid_params(f"limit must be a whole number from 1 to {MAX_HISTORY}")
        metadata = params.get("metadata")
        if metadata is not None and not isinstance(metadata, dict):
            raise invalid_params("metadata must be an object")
        before_id = _string(params, "before")
        before: RunnableConfig | None = (
            {"configurable": {"thread_id": thread_id, "checkpoint_id": before_id}}
            if before_id
            else None
        )
        states = [
            snapshot_json(s)
            async for s in self.graph.aget_state_history(
                self._config(thread_id, params), filter=metadata, before=before, limit=limit
            )
        ]
        return Reply(states)

    async def update_state(self, request: Request) -> Reply:
        params = request.params
        thread_id = _string(params, "thread_id", required=True)
        assert thread_id is not None
        as_node = _string(params, "as_node")
        config = await self.graph.aupdate_state(
            self._config(thread_id, params), params.get("values"), as_node=as_node
        )
        return Reply({"checkpoint": _checkpoint(config)})
