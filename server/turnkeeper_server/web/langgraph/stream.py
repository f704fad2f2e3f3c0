"""A run's journaled events as LangGraph's stream parts, over SSE.

What a client of LangGraph's API streams is made from the turn's events here, not
sent by the agent: the service holds the journal, so a stream can be joined at any
moment, resumed with ``Last-Event-ID`` for as long as the events are retained, and
followed across a crash of the agent running the run.

The rewind rule (docs/langgraph-api.md, decision 210): a stream carries only the
*settled* events, those no re-drive can take back (engine/watch.py
``follow_settled``: at or before the newest checkpoint's boundary, or all of them
once the run is parked or over). So no part is ever retracted or repeated and the
SSE ids are the journal's seqs, stable for a resume; a step's parts reach the
client when the step's checkpoint is durable. When the agent dies mid-step, what
the dead execution produced after its last checkpoint was never sent, and the
re-run's parts are the only ones the client sees.

Parts per journaled event (stream modes as LangGraph names them):

========================  ===========================================================
event                     parts
========================  ===========================================================
``values``                ``values``: the state at a checkpoint (hosts with
                          ``langgraph_api``)
``step``                  ``updates``: ``{node: update}``
``token``                 ``messages`` (mode ``messages-tuple``): ``[chunk, metadata]``;
                          mode ``messages``: ``messages/partial`` with the text so far
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

    def __init__(self, run_id: str, modes: frozenset[str]) -> None:
        self.run_id = run_id
        self.modes = modes
        self.values: Any = None
        self.saw_values = False
        self.interrupts: list[dict[str, Any]] = []
        self.error: dict[str, Any] | None = None
        # The message streaming: (its key, its id, its text so far).
        self._message: tuple[str, str, str] | None = None
        self._messages = 0

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
        return list(handler(data))

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
        if "updates" in self.modes:
            yield "updates", {str(data.get("node")): data.get("update")}

    def _on_token(self, data: dict[str, Any]) -> Iterable[Part]:
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
        if "messages-tuple" in self.modes:
            chunk = {"type": "AIMessageChunk", "content": text, "id": message_id}
            yield "messages", [chunk, {"langgraph_node": node, "run_id": self.run_id}]
        if "messages" in self.modes:
            yield "messages/partial", [{"type": "ai", "content": so_far, "id": message_id}]

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
        described = {"value": data.get("value"), "id": data.get("id")}
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
