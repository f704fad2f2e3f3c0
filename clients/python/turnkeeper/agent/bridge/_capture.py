"""A graph run's events as the executor captures them: LangChain callbacks
(:class:`EventCapture`) and the graph's own stream (:class:`StreamCapture`) become
events in the turn's :class:`~turnkeeper.agent.bridge._events.EventLog`.

Event types and their ``data``:

- ``token`` ``{node, text}``: a chunk of a chat model's streamed reply; on a bridge
  serving the LangGraph API also ``id`` (its message's id), ``chunk`` (the whole
  ``AIMessageChunk`` as LangGraph's server sends it: ``tool_call_chunks``,
  ``usage_metadata``, ``response_metadata``, ...) for every chunk, those without
  text (tool-call chunks, the closing one) included, and on a model call's first
  chunk ``metadata`` (the call's LangGraph metadata: ``langgraph_step``,
  ``langgraph_node``, ``langgraph_path``, ``checkpoint_ns``, ``ls_*``, ...);
- ``tool_call_start`` ``{node, name, tool_call_id, input}`` and
  ``tool_call_end`` ``{node, name, tool_call_id, output | error}``;
- ``step`` ``{node, step, update}``: a node of the graph finished (``step`` is
  LangGraph's superstep, ``update`` what the node returned; on a bridge serving
  the LangGraph API, messages in it whole and the node's ``metadata``);
- ``interrupt`` ``{id, value}``: the graph called ``interrupt(value)``; the turn parks;
- ``values`` ``{values}``: the graph's state, before each checkpoint (on a bridge
  serving the LangGraph API, ``BridgeConfig.langgraph_api``);
- ``custom`` ``{data}``: what the graph wrote with ``get_stream_writer()`` (on a
  bridge serving the LangGraph API; read from the stream, so a crash right after
  its step's checkpoint can lose it);
- ``stream`` ``{ns, mode, data}``: a part of the graph's own stream that a LangGraph
  API run asked for beyond these (:class:`StreamCapture`: the ``checkpoints``,
  ``tasks`` and ``debug`` modes, and its subgraphs' parts);
- ``final`` ``{output}``: the graph's output; the service then appends ``turn.done``;
- ``error`` ``{type, message}``: the graph raised; the service then appends
  ``turn.failed``.

Event data holds no run ids or timestamps, so an execution that re-runs a step
produces the same events as the one that was lost.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
from collections.abc import Collection
from typing import Any, Final, cast
from uuid import UUID, uuid4

from langchain_core.callbacks import BaseCallbackHandler, BaseCallbackManager
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tracers.event_stream import _AstreamEventsCallbackHandler
from langgraph._internal._constants import CONFIG_KEY_STREAM
from langgraph.errors import GraphBubbleUp
from langgraph.pregel.protocol import StreamProtocol
from langgraph.types import StreamMode

from turnkeeper.agent.bridge._convert import to_jsonable
from turnkeeper.agent.bridge._events import EventLog
from turnkeeper.agent.saver._identity import ATTEMPT_KEY, TURN_ID_KEY

log = logging.getLogger(__name__)

# LangGraph's server names its langgraph in every message part's metadata.
_LANGGRAPH_VERSION: Final = importlib.metadata.version("langgraph")

# Metadata keys that say which execution ran, not what it did.
_PRIVATE_METADATA: Final = frozenset({TURN_ID_KEY, ATTEMPT_KEY})


def _name_messages(output: Any) -> None:
    """Give each message a node returned without an id one (LangGraph's
    StreamMessagesHandler does the same, on the same objects)."""
    values = list(output.values()) if isinstance(output, dict) else [output]
    for value in values:
        for message in value if isinstance(value, list | tuple) else [value]:
            if isinstance(message, BaseMessage) and message.id is None:
                message.id = str(uuid4())


class EventCapture(BaseCallbackHandler):
    """LangChain callbacks of one graph run, as events in an :class:`EventLog`.

    ``run_inline``: called in the node's own thread or task, in order, before the
    node goes on, so an event is in the log before the node's writes are saved."""

    run_inline = True
    raise_error = False

    def __init__(
        self,
        events: EventLog,
        *,
        message_ids: bool = False,
        channels: Collection[str] | None = None,
        tokens: bool = True,
    ) -> None:
        self.events = events
        # False: no `token` event, though a model streams (one made to, or the
        # `events` mode's handler making it): the run asked for none (decision 770).
        self.tokens = tokens
        # Tokens carry their message's id (the LangGraph API's message chunks do;
        # off elsewhere: a re-run's model makes up new ids, and transcripts compare).
        self.message_ids = message_ids
        # A step's update holds these of the node's output only, as LangGraph's
        # `updates` do (a subgraph's node returns the subgraph's whole state).
        self.channels = None if channels is None else frozenset(channels)
        self._lock = threading.Lock()
        self._root: UUID | None = None
        self._nodes: dict[UUID, tuple[str, int, dict[str, Any]]] = {}
        self._models: dict[UUID, tuple[str, dict[str, Any]]] = {}
        self._described: set[UUID] = set()
        self._tools: dict[UUID, dict[str, Any]] = {}

    # The graph and its nodes.

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            if parent_run_id is None:
                self._root = run_id
                return
            node = (metadata or {}).get("langgraph_node")
            # Only the graph's own nodes are steps; chains inside a node (and the
            # nodes of a subgraph) are part of that node's step.
            if parent_run_id == self._root and node and kwargs.get("name") == node:
                step = int((metadata or {}).get("langgraph_step", 0))
                self._nodes[run_id] = (str(node), step, self._metadata(metadata))

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            node = self._nodes.pop(run_id, None)
        if node is None:
            return
        if self.channels is not None and isinstance(outputs, dict):
            outputs = {k: v for k, v in outputs.items() if k in self.channels}
            # A node that wrote none of them: LangGraph's `updates` says null.
            outputs = outputs or None
        data: dict[str, Any] = {"node": node[0], "step": node[1], "update": outputs}
        if self.message_ids:
            # The LangGraph API's `updates` carry messages whole, and a message the
            # node returned is streamed whole with the node's metadata: one without
            # an id gets one here, as LangGraph's server's stream handler gives it
            # (the state's reducer keeps it).
            _name_messages(outputs)
            # At depth 1, its place in `data`: the event's JSON as it is (plain).
            data["update"] = to_jsonable(outputs, 1, whole=True)
            data["metadata"] = node[2]
            self.events.emit("step", data, plain=True)
            return
        self.events.emit("step", data)

    def _metadata(self, metadata: dict[str, Any] | None) -> dict[str, Any]:
        """A callback's metadata as the LangGraph API's message parts carry it: plain
        JSON values, without the run's fencing keys (an execution's attempt must not
        make a re-run's events differ)."""
        if not self.message_ids or not metadata:
            return {}
        # Depth 2: the place of its values in an event's data (`metadata`'s).
        return {
            "langgraph_version": _LANGGRAPH_VERSION,
            **{
                str(k): to_jsonable(v, 2)
                for k, v in metadata.items()
                if k not in _PRIVATE_METADATA and not str(k).startswith("__")
            },
        }

    def on_chain_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        # An interrupted or failed node is not a finished step: the interrupt or the
        # error is reported once, for the whole run, by the runtime.
        with self._lock:
            self._nodes.pop(run_id, None)
        if not isinstance(error, GraphBubbleUp):
            log.debug("turn_id=%s: node run %s failed: %r", self.events.turn_id, run_id, error)

    # Chat models and LLMs.

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self._models[run_id] = (
                str((metadata or {}).get("langgraph_node", "")),
                self._metadata(metadata),
            )

    def on_llm_start(
        self,
        serialized: dict[str, Any],
        prompts: list[str],
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        with self._lock:
            self._models[run_id] = (str((metadata or {}).get("langgraph_node", "")), {})

    def on_llm_new_token(
        self, token: str | list[str | dict[str, Any]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        if not self.tokens:
            return
        if not isinstance(token, str):
            # Content blocks: the text ones are what a reader sees.
            token = "".join(
                b if isinstance(b, str) else str(b.get("text", ""))
                for b in token
                if isinstance(b, str) or b.get("type") == "text"
            )
        message = getattr(kwargs.get("chunk"), "message", None)
        whole = self.message_ids and isinstance(message, BaseMessage)
        if not token and not whole:
            return  # tool-call chunks and empty keep-alives carry no text
        with self._lock:
            node, metadata = self._models.get(run_id, ("", {}))
            # The call's metadata rides on its first chunk only: the same for all.
            first = run_id not in self._described
            self._described.add(run_id)
        data: dict[str, Any] = {"node": node, "text": token}
        message_id = getattr(message, "id", None)
        if self.message_ids and isinstance(message_id, str):
            data["id"] = message_id
        if whole:
            # The chunk as LangGraph's server streams it, every field of it (at
            # depth 1, its place in `data`).
            data["chunk"] = to_jsonable(message, 1, whole=True)
            if first:
                data["metadata"] = metadata
        # Plain: the node and the text are strings, the id a string, the rest made
        # at its depth (the metadata by `_metadata`).
        self.events.emit("token", data, plain=True)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._models.pop(run_id, None)
            self._described.discard(run_id)

    def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._models.pop(run_id, None)
            self._described.discard(run_id)

    # Tools.

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        call = {
            "node": str((metadata or {}).get("langgraph_node", "")),
            "name": (serialized or {}).get("name") or kwargs.get("name") or "",
            "tool_call_id": kwargs.get("tool_call_id"),
        }
        with self._lock:
            self._tools[run_id] = call
        self.events.emit("tool_call_start", call | {"input": inputs if inputs else input_str})

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._tools.pop(run_id, None)
        if call is not None:
            content = getattr(output, "content", output)
            self.events.emit("tool_call_end", call | {"output": to_jsonable(content)})

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            call = self._tools.pop(run_id, None)
        if call is not None and not isinstance(error, GraphBubbleUp):
            self.events.emit("tool_call_end", call | {"error": f"{type(error).__name__}: {error}"})


class StreamCapture:
    """What a LangGraph API run asks of the graph's own stream beyond every run's
    events (its ``stream`` option, turnkeeper._run_request): the ``checkpoints``,
    ``tasks`` and ``debug`` modes, with ``subgraphs`` the ``values``, ``updates``
    and ``custom`` parts of the graph's subgraphs, and the ``events`` mode
    (:class:`_RunEvents`), as ``stream`` events ``{ns, mode, data}`` (``ns``: the
    namespace, ``[]`` for the root graph).

    Handed to LangGraph as the run's stream (:meth:`configurable`), which every
    Pregel loop of the run, a subgraph's too, writes its parts to as it produces
    them, in the loop's own thread: so a step's parts are in the :class:`EventLog`
    before the step's checkpoint is stored, and retained with it (the boundary rule).
    The root graph's ``values`` and ``updates`` are journaled as every run's are
    (``values``, ``step``); they are not repeated here."""

    ROOT_MODES: Final[tuple[StreamMode, ...]] = ("checkpoints", "tasks", "debug")
    SUBGRAPH_MODES: Final[tuple[StreamMode, ...]] = ("values", "updates", "custom")

    def __init__(self, events: EventLog, captures: list[str], graph_name: str) -> None:
        self.events = events
        self.graph_name = graph_name
        self.subgraphs = "subgraphs" in captures
        modes: set[StreamMode] = {m for m in self.ROOT_MODES if m in captures}
        if self.subgraphs:
            modes.update(self.SUBGRAPH_MODES)
        self.modes = modes
        self.events_mode = "events" in captures

    def applied(self, config: RunnableConfig) -> RunnableConfig:
        """``config`` with what makes LangGraph write to this capture: the run's
        stream in its configurable keys, the ``events`` handler in its callbacks."""
        configured: Any = dict(config)
        if self.modes:
            stream = StreamProtocol(self, self.modes)
            configured["configurable"] = {**config["configurable"], CONFIG_KEY_STREAM: stream}
        if self.events_mode:
            handler = _RunEvents(self.events, self.graph_name)
            callbacks = config.get("callbacks")
            if isinstance(callbacks, BaseCallbackManager):
                callbacks = callbacks.copy()
                callbacks.add_handler(handler, inherit=True)
                configured["callbacks"] = callbacks
            else:
                configured["callbacks"] = [*(callbacks or []), handler]
        return cast(RunnableConfig, configured)

    def __call__(self, chunk: tuple[tuple[str, ...], str, Any]) -> None:
        ns, mode, data = chunk
        if not ns and mode in self.SUBGRAPH_MODES:
            return  # the root's: journaled as every run's are
        if ns and not self.subgraphs:
            return
        data = _without_internals(to_jsonable(data, whole=True))
        self.events.emit("stream", {"ns": list(ns), "mode": mode, "data": data})


def _without_internals(value: Any) -> Any:
    """A part without the run's private configurable keys (``__``-prefixed: the
    effect ledger's snapshot, LangGraph's own), which a checkpoint's config holds."""
    if isinstance(value, dict):
        return {
            k: (
                {n: v for n, v in c.items() if not str(n).startswith("__")}
                if k == "configurable" and isinstance(c := value[k], dict)
                else _without_internals(value[k])
            )
            for k in value
        }
    if isinstance(value, list):
        return [_without_internals(v) for v in value]
    return value


class _RunEvents(_AstreamEventsCallbackHandler):
    """The ``events`` stream mode: the run's callbacks as LangChain's
    ``astream_events`` (v2) makes them, journaled instead of queued. As LangGraph's
    server sends them: without the hidden ones (``langsmith:hidden``). Its async
    callbacks run as the graph's do; an event that lands after its step's
    checkpoint is lost with a crash right then, never sent twice (like ``custom``)."""

    def __init__(self, events: EventLog, graph_name: str) -> None:
        super().__init__()
        self._log = events
        self._graph_name = graph_name
        self._root: str | None = None

    def _send(self, event: Any, event_type: str) -> None:
        if not self.root_event_filter.include_event(event, event_type):
            return
        if "langsmith:hidden" in (event.get("tags") or ()):
            return
        event = dict(event)
        if not event.get("parent_ids"):
            # The graph's own run, as LangGraph's server runs it: named after the
            # graph, its id the run's, its end with the output only.
            self._root = self._root or str(event.get("run_id"))
            event["name"] = self._graph_name
            if event.get("event") == "on_chain_end" and isinstance(event.get("data"), dict):
                event["data"] = {k: v for k, v in event["data"].items() if k != "input"}
        if self._root is not None:
            turn = self._log.turn_id
            event["run_id"] = turn if event.get("run_id") == self._root else event.get("run_id")
            event["parent_ids"] = [
                turn if p == self._root else p for p in event.get("parent_ids") or []
            ]
        data = to_jsonable(event, whole=True)
        self._log.emit("stream", {"ns": [], "mode": "events", "data": data})
