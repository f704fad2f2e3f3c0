"""A run's journaled events as LangGraph's stream parts, over SSE.

What a client of LangGraph's API streams is made from the turn's events here, not
sent by the agent: the service holds the journal, so a stream can be joined at any
moment, resumed with ``Last-Event-ID`` for as long as the events are retained, and
followed across a crash of the agent running the run.

The rewind rule (docs/langgraph-api.md, decisions 210, 290-292). Live (the
default): a model's ``token`` events go out as soon as they are journaled, every
other event once *settled*, in seq order (engine/watch.py ``follow_live``). When a
re-drive takes tokens back, the stream sends a ``remove`` message part (LangGraph's
RemoveMessage) for each message they streamed, then the rewound-to state as
``values`` (``Translator.rewound``), then the re-run's parts; SSE ids are
``live_id(seq, attempt)``, so a resume knows whether what it saw still stands.
Settled (``X-Turnkeeper-Stream: settled`` or the service's ``--langgraph-stream``):
only the events no re-drive can take back (``follow_settled``: at or before the
newest checkpoint's boundary, or all once the run is parked or over), so no part is
ever retracted and the SSE ids are the journal's seqs; a step's parts, its tokens
included, reach the client when the step's checkpoint is durable.

Parts per journaled event (stream modes as LangGraph names them):

========================  ===========================================================
event                     parts
========================  ===========================================================
``values``                ``values``: the state at a checkpoint (hosts with
                          ``langgraph_api``)
``step``                  ``updates``: ``{node: update}``; before it, ``messages``
                          ``[message, metadata]`` (mode ``messages``:
                          ``messages/metadata`` and ``messages/complete``) for each
                          message the node returned that was not streamed
``token``                 ``messages`` (mode ``messages-tuple``): ``[chunk, metadata]``,
                          the chunk whole as the agent journaled it; mode
                          ``messages``: ``messages/metadata`` once per message,
                          then ``messages/partial`` with the message so far, whole
``interrupt``             ``updates``: ``{"__interrupt__": [...]}``; ``values``: the
                          last state with ``__interrupt__``
``final``                 ``values``: the output, when no ``values`` event came
``stream``                the graph's own part, journaled for a run that asked for it
                          (the agent's StreamCapture): ``checkpoints``, ``tasks``,
                          ``debug``, ``events``; a subgraph's parts named with their
                          namespace, ``updates|inner:<task id>`` (``stream_subgraphs``)
``custom``                ``custom``: what the graph wrote with ``get_stream_writer()``
``error``, ``turn.failed``  ``error``: ``{error, message}``
========================  ===========================================================

Every stream starts with ``metadata`` ``{run_id, attempt}`` (not on a resume).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final

from turnkeeper_server.records import EventRecord

# The modes a run may ask for.
STREAM_MODES: Final = frozenset(
    {
        "values",
        "updates",
        "messages",
        "messages-tuple",
        "custom",
        "metadata",
        "debug",
        "events",
        "checkpoints",
        "tasks",
    }
)

Part = tuple[str, Any]

# The events a live stream sends before their step's checkpoint: a model's tokens
# (a rewind takes them back with `remove` parts), and those that make no part.
LIVE_EVENTS: Final = frozenset({"token"})


def held(event_type: str) -> bool:
    """Whether a live stream holds an event of this type until it is settled: it
    makes parts, and they are not tokens (nothing could take them back)."""
    return event_type not in LIVE_EVENTS and hasattr(
        Translator, "_on_" + event_type.replace(".", "_")
    )


def modes_of(raw: Any) -> frozenset[str]:
    """The requested stream modes (LangGraph's default: values)."""
    if raw is None:
        return frozenset({"values"})
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("stream_mode must be a mode or a list of modes")
    unknown = sorted(set(names) - STREAM_MODES)
    if unknown:
        raise ValueError(
            f"stream_mode {', '.join(unknown)} is not one of {', '.join(sorted(STREAM_MODES))}"
        )
    return frozenset(names) or frozenset({"values"})


class Translator:
    """One stream's events -> parts; keeps what a later part needs (the last state,
    the text of a message streaming)."""

    def __init__(
        self,
        run_id: str,
        modes: frozenset[str],
        *,
        context: dict[str, Any] | None = None,
        subgraphs: bool = False,
    ) -> None:
        self.run_id = run_id
        self.modes = modes
        # `stream_subgraphs`: a subgraph's model tokens stream, named with its
        # namespace (without it, LangGraph streams none of them: the subgraph
        # node's returned messages go out whole at its step, as a root node's).
        self.subgraphs = subgraphs
        # What every message part's metadata says of the run (its thread, graph,
        # assistant, ...), under what the agent journaled for the model call.
        self.context = {"run_id": run_id, **(context or {})}
        self.values: Any = None
        self.saw_values = False
        self.interrupts: list[dict[str, Any]] = []
        self.error: dict[str, Any] | None = None
        # The message streaming: (its key, its id, its text so far).
        self._message: tuple[str, str, str] | None = None
        self._messages = 0
        # The message id each token event streamed (by seq), each streamed
        # message's metadata, and the ids streamed since the last `values`.
        self._token_ids: dict[int, str] = {}
        self._metadata: dict[str, dict[str, Any]] = {}
        self._streamed: set[str] = set()
        self._attempt = 1
        # Mode `messages`: each streamed message so far, whole.
        self._whole: dict[str, dict[str, Any]] = {}

    def reset(self) -> None:
        """Forget everything read (a resume starts over from an earlier seq)."""
        self.__init__(  # type: ignore[misc]
            self.run_id, self.modes, context=self.context, subgraphs=self.subgraphs
        )

    def start_from(self, values_json: str | None) -> None:
        """The state before the run's first event (a `values` event's data), if any."""
        data = json.loads(values_json) if values_json else None
        if isinstance(data, dict) and "values" in data:
            self.values = data["values"]

    def settled(self) -> None:
        """What was read so far is history: keep the state, forget the interrupts
        (answered since) and the message being streamed."""
        self.interrupts = []
        self._message = None

    def parts(self, event: EventRecord) -> list[Part]:
        data = json.loads(event.data_json or "null")
        handler = getattr(self, "_on_" + event.type.replace(".", "_"), None)
        if handler is None or not isinstance(data, dict):
            return []
        self._attempt = event.attempt
        if event.type == "token":
            return list(self._on_token(data, event.seq))
        return list(handler(data))

    def rewound(self, taken: Iterable[EventRecord]) -> list[Part]:
        """The parts that take back what a rewind took back (engine/watch.py
        `Rewound`): a `remove` message part (LangGraph's RemoveMessage) for each
        message streamed by the `taken` events, which will not be settled, then
        the state the turn was rewound to as `values` (useStream replaces its
        state with it). With nothing `taken` (a resume from a position the journal
        no longer has, so which messages the reader saw is not known), the remove
        is LangGraph's remove-all, followed by the rewound-to state's messages
        whole: add_messages then holds exactly that state's messages."""
        taken = tuple(taken)
        self._message = None
        parts: list[Part] = []
        gone: list[str] = []
        for event in taken:
            message_id = self._token_ids.pop(event.seq, None)
            if message_id is not None and message_id not in gone:
                gone.append(message_id)
        settled_messages = _messages_of(self.values)
        if "messages-tuple" in self.modes:
            if not taken:
                parts.append(("messages", [_removal(REMOVE_ALL), dict(self.context)]))
                for message in settled_messages:
                    meta = self._metadata.get(str(message.get("id")), self.context)
                    parts.append(("messages", [message, meta]))
            for message_id in gone:
                meta = self._metadata.get(message_id, self.context)
                parts.append(("messages", [_removal(message_id), meta]))
        # After the removals: a reader applying them (add_messages) finds each
        # message still there; useStream's state is then the rewound-to one.
        if "values" in self.modes and self.saw_values:
            parts.append(("values", self.values))
        settled_ids = {m.get("id") for m in settled_messages}
        self._streamed = {i for i in self._streamed if i not in gone or i in settled_ids}
        return parts

    def _on_values(self, data: dict[str, Any]) -> Iterable[Part]:
        if "values" not in data:
            # Over the event size limit, journaled truncated: the state is not in
            # it. Nothing is sent rather than a wrong state; get_state has it whole.
            return
        self.values = data.get("values")
        self.saw_values = True
        self._message = None
        if "values" in self.modes:
            yield "values", self.values

    def _on_step(self, data: dict[str, Any]) -> Iterable[Part]:
        self._message = None
        node = str(data.get("node"))
        yield from self._returned(node, data)
        if "updates" in self.modes:
            yield "updates", {node: data.get("update")}

    def _returned(self, node: str, data: dict[str, Any]) -> Iterable[Part]:
        if "messages-tuple" not in self.modes and "messages" not in self.modes:
            return
        # The messages the node returned that were not streamed (a tool's result, a
        # reply made without streaming) go out whole, as LangGraph's server sends
        # them; those streamed already, or in the state before, do not.
        known = self._streamed | {m.get("id") for m in _messages_of(self.values)}
        given_meta = data.get("metadata")
        meta = {
            **self.context,
            "run_attempt": self._attempt,
            **(given_meta if isinstance(given_meta, dict) else {"langgraph_node": node}),
        }
        for message in _returned_messages(data.get("update")):
            message_id = message.get("id")
            if isinstance(message_id, str) and message_id not in known:
                known.add(message_id)
                self._streamed.add(message_id)
                if "messages-tuple" in self.modes:
                    yield "messages", [message, meta]
                else:
                    yield "messages/metadata", {message_id: {"metadata": meta}}
                    yield "messages/complete", [message]

    def _on_token(self, data: dict[str, Any], seq: int = 0) -> Iterable[Part]:
        node = str(data.get("node", ""))
        text = str(data.get("text", ""))
        # The model's message id when the bridge journals it (the final message in
        # `values` has the same), else one per message the run streams: a new one
        # when the node changes or a step ended in between.
        given = data.get("id")
        key = given if isinstance(given, str) else node
        if self._message is None or self._message[0] != key:
            self._messages += 1
            message_id = given if isinstance(given, str) else f"run-{self.run_id}-{self._messages}"
            self._message = (key, message_id, "")
        key, message_id, so_far = self._message
        so_far += text
        self._message = (key, message_id, so_far)
        # The model call's metadata rides on its first chunk (the agent journals it
        # once); the message's later chunks carry the same.
        given_meta = data.get("metadata")
        meta = self._metadata.get(message_id)
        if isinstance(given_meta, dict) or meta is None:
            meta = {
                **self.context,
                "run_attempt": self._attempt,
                **(given_meta if isinstance(given_meta, dict) else {"langgraph_node": node}),
            }
            self._metadata[message_id] = meta
        ns = graph_namespace(meta)
        if ns and not self.subgraphs:
            return  # a subgraph's token: its message goes out whole at the step
        self._token_ids[seq] = message_id
        self._streamed.add(message_id)
        if "messages-tuple" in self.modes:
            given_chunk = data.get("chunk")
            if isinstance(given_chunk, dict):
                # The whole chunk as the agent journaled it (every field of LangGraph's
                # AIMessageChunk), under the id the stream uses for its message.
                chunk = {**given_chunk, "id": message_id}
            else:
                chunk = {"type": "AIMessageChunk", "content": text, "id": message_id}
            yield "|".join(["messages", *ns]), [chunk, meta]
        elif "messages" in self.modes:
            # Mode `messages` as LangGraph's server streams it (when the run did not
            # ask for the tuples too): the message's metadata once, then the message
            # so far, whole, at each chunk; never named with a namespace.
            given_chunk = data.get("chunk")
            piece = given_chunk if isinstance(given_chunk, dict) else {"content": text}
            if message_id not in self._whole:
                self._whole[message_id] = _ai_message(message_id)
                yield "messages/metadata", {message_id: {"metadata": meta}}
            _merge_chunk(self._whole[message_id], piece)
            yield "messages/partial", [dict(self._whole[message_id])]

    def _on_custom(self, data: dict[str, Any]) -> Iterable[Part]:
        if "custom" in self.modes:
            yield "custom", data.get("data")

    def _on_stream(self, data: dict[str, Any]) -> Iterable[Part]:
        # Journaled only for a run that asked for it; over the event size limit the
        # event is truncated and carries no part: nothing is sent rather than half.
        mode, ns = data.get("mode"), data.get("ns")
        if not isinstance(mode, str) or not isinstance(ns, list) or "data" not in data:
            return
        if mode in self.modes:
            part = data["data"]
            if mode == "debug" and isinstance(part, dict) and part.get("type") == "checkpoint":
                part = {**part, "payload": _debug_checkpoint(part.get("payload"))}
            yield "|".join([mode, *map(str, ns)]), part

    def _on_interrupt(self, data: dict[str, Any]) -> Iterable[Part]:
        described = {
            "value": data.get("value"),
            "id": data.get("id"),
            "response_schema": data.get("response_schema"),
        }
        self.interrupts.append(described)
        if "updates" in self.modes:
            yield "updates", {"__interrupt__": [described]}
        if "values" in self.modes:
            state = self.values if isinstance(self.values, dict) else {}
            yield "values", {**state, "__interrupt__": list(self.interrupts)}

    def _on_final(self, data: dict[str, Any]) -> Iterable[Part]:
        if self.saw_values:
            return
        self.values = data.get("output")
        if "values" in self.modes:
            yield "values", self.values

    def _on_error(self, data: dict[str, Any]) -> Iterable[Part]:
        self.error = {"error": str(data.get("type", "Error")), "message": str(data.get("message"))}
        yield "error", self.error

    def _on_turn_failed(self, data: dict[str, Any]) -> Iterable[Part]:
        if self.error is not None:
            return
        message = str(data.get("error") or data.get("message") or "the run failed")
        self.error = {"error": "RunFailed", "message": message}
        yield "error", self.error

    def outcome(self) -> Any:
        """What runs.wait and runs.join answer: the last state (with the pending
        interrupts), or the error."""
        if self.error is not None:
            return {"__error__": self.error}
        if self.interrupts and isinstance(self.values, dict):
            return {**self.values, "__interrupt__": list(self.interrupts)}
        return self.values


def _ai_message(message_id: str) -> dict[str, Any]:
    """An AI message with no content yet, every field LangGraph serializes."""
    return {
        "content": "",
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "ai",
        "name": None,
        "id": message_id,
        "tool_calls": [],
        "invalid_tool_calls": [],
        "usage_metadata": None,
    }


def _merge_chunk(message: dict[str, Any], chunk: dict[str, Any]) -> None:
    """Add a chunk to the message so far, as LangChain adds AIMessageChunks (text
    content joined, dicts merged, tool calls gathered, the usage the latest)."""
    content = chunk.get("content")
    if isinstance(content, str) and isinstance(message["content"], str):
        message["content"] += content
    elif content:
        message["content"] = content
    for key in ("additional_kwargs", "response_metadata"):
        if isinstance(chunk.get(key), dict):
            message[key] = {**message[key], **chunk[key]}
    for key in ("tool_calls", "invalid_tool_calls"):
        if isinstance(chunk.get(key), list):
            message[key] = [*message[key], *chunk[key]]
    if chunk.get("usage_metadata") is not None:
        message["usage_metadata"] = chunk["usage_metadata"]
    if chunk.get("name") is not None:
        message["name"] = chunk["name"]


# LangGraph's RemoveMessage id that removes every message before it.
REMOVE_ALL: Final = "__remove_all__"


def _removal(message_id: str) -> dict[str, Any]:
    """LangGraph's RemoveMessage, as its server serializes one."""
    return {
        "content": "",
        "additional_kwargs": {},
        "response_metadata": {},
        "type": "remove",
        "name": None,
        "id": message_id,
    }


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("type"), str) and "content" in value


def _messages_of(state: Any) -> list[dict[str, Any]]:
    """The messages of a state's `messages` key (LangGraph's MessagesState)."""
    found = state.get("messages") if isinstance(state, dict) else None
    return [m for m in found if _is_message(m)] if isinstance(found, list) else []


def _returned_messages(update: Any) -> list[dict[str, Any]]:
    """The messages in what a node returned: a message, a list of them, or a
    state whose keys hold either (LangGraph's StreamMessagesHandler looks there)."""
    if _is_message(update):
        return [update]
    values = update if isinstance(update, list) else []
    if isinstance(update, dict):
        values = list(update.values())
    found: list[dict[str, Any]] = []
    for value in values:
        if _is_message(value):
            found.append(value)
        elif isinstance(value, list):
            found.extend(v for v in value if _is_message(v))
    return found


# A live stream's SSE id: the event's seq and the attempt that wrote it, in one
# number that only grows along a stream (attempts only grow along the journal's
# seqs). A resume names both: whether what it saw was taken back is then known.
ATTEMPT_STRIDE: Final = 10**9


def live_id(seq: int, attempt: int) -> str:
    return str((attempt + 1) * ATTEMPT_STRIDE + seq)


def position_of(event_id: int) -> tuple[int, int | None]:
    """A Last-Event-ID's (seq, attempt): a settled stream's id is a bare seq, and
    its attempt unknown (None)."""
    stride = event_id // ATTEMPT_STRIDE
    return event_id % ATTEMPT_STRIDE, (stride - 1 if stride else None)


def _debug_checkpoint(payload: Any) -> Any:
    """A ``debug`` checkpoint's payload as LangGraph's server sends it: with its
    ``checkpoint`` and ``parent_checkpoint``, and a subgraph task's config as the
    task's ``checkpoint``."""
    if not isinstance(payload, dict):
        return payload
    tasks = []
    for task in payload.get("tasks") or []:
        state = task.get("state") if isinstance(task, dict) else None
        if isinstance(state, dict) and state.get("configurable"):
            task = {k: v for k, v in task.items() if k != "state"}
            task["checkpoint"] = state["configurable"]
        tasks.append(task)
    return {
        **payload,
        "checkpoint": _checkpoint_of(payload.get("config")),
        "parent_checkpoint": _checkpoint_of(payload.get("parent_config")),
        "tasks": tasks,
    }


def _checkpoint_of(config: Any) -> dict[str, Any] | None:
    configurable = config.get("configurable") if isinstance(config, dict) else None
    if not isinstance(configurable, dict) or not (
        configurable.get("thread_id") and configurable.get("checkpoint_id")
    ):
        return None
    checkpoint = {
        "checkpoint_id": configurable["checkpoint_id"],
        "thread_id": configurable["thread_id"],
    }
    if "checkpoint_ns" in configurable:
        checkpoint["checkpoint_ns"] = configurable["checkpoint_ns"] or ""
    if "checkpoint_map" in configurable:
        checkpoint["checkpoint_map"] = configurable["checkpoint_map"]
    return checkpoint


def sse(event: str, data: Any, *, id: str | None = None) -> bytes:
    lines = [] if id is None else [f"id: {id}"]
    lines.append(f"event: {event}")
    lines.append("data: " + json.dumps(data, separators=(",", ":"), ensure_ascii=False))
    return ("\n".join(lines) + "\n\n").encode()


# LangGraph's task-path marker for a call made with `@task` inside a node.
_PUSH: Final = "__pregel_push"


def graph_namespace(metadata: dict[str, Any]) -> tuple[str, ...]:
    """The namespace of the graph a model call ran in, from its LangGraph metadata
    (as LangGraph's message stream computes it): the task's checkpoint namespace
    without the task's own segment, nor one per enclosing `@task` call. () for the
    root graph's nodes, and for metadata that does not say."""
    checkpoint_ns = metadata.get("langgraph_checkpoint_ns")
    if not isinstance(checkpoint_ns, str) or not checkpoint_ns:
        return ()
    ns = tuple(checkpoint_ns.split("|"))
    path = metadata.get("langgraph_path")
    drop = 1
    while (
        isinstance(path, list | tuple) and len(path) == 4 and path[0] == _PUSH and path[-1] is True
    ):
        drop += 1
        path = path[1]
    return ns[:-drop]
