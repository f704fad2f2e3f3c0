"""What a turn's journaled input asks for: new input, a continuation, or a regenerate.

The journal keeps one JSON value per turn, its input, and a turn that dies before
its first checkpoint is started again from it alone. So the input carries the
turn's intent, and an execution reads it back the same way whether it is the first
one or a re-drive:

- ``null``: continue the thread from its latest checkpoint (``astream(None)``); the
  pending work of an earlier turn that failed or was cut short;
- ``{"__turnkeeper__": "regenerate"}`` (:data:`REGENERATE_INPUT`): reposition the
  thread to the entry node of its latest run (:mod:`turnkeeper.agent._reposition`), then
  run from there: the latest input is answered again;
- ``{"__turnkeeper__": "run", "input", "command", "checkpoint_id",
  "interrupt_before", "interrupt_after", "stream", "config", "context", "tokens"}``
  (:class:`RunIntent`): a LangGraph API run with options: a ``Command`` (resume,
  update, goto) instead of input, a start at an earlier checkpoint (a fork), static
  interrupts, the stream modes journaled for it alone, the run's config and
  runtime context (its assistant's merged in), and ``tokens: false`` for a run
  whose stream shows no model token (decision 770), kept for every execution;
- anything else: new input, handed to the bridge's ``input_mapper``.

An object with a top-level ``"__turnkeeper__"`` key is reserved for these markers;
``responses/create`` refuses one as ``input``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel

from turnkeeper._run_request import INTENT_KEY as INTENT_KEY
from turnkeeper._run_request import RunOptions, parse_run_options
from turnkeeper.agent._reposition import entry_checkpoint_id
from turnkeeper.errors import PermissionDenied

REGENERATE: Final = "regenerate"
#: The journaled input of a regenerate turn.
REGENERATE_INPUT: Final = {INTENT_KEY: REGENERATE}


RUN: Final = "run"


@dataclass(frozen=True)
class RunIntent:
    """A LangGraph API run's input and options (turnkeeper._run_request), journaled
    together."""

    input: Any = None
    options: RunOptions = field(default_factory=RunOptions)

    def journaled(self) -> dict[str, Any]:
        return {INTENT_KEY: RUN, "input": self.input, **self.options.as_dict()}

    def stream_kwargs(self) -> dict[str, Any]:
        """What ``astream`` takes of it, for every execution of the turn (the
        context as given: :func:`context_for` fits it to the graph)."""
        return {
            name: value
            for name in ("interrupt_before", "interrupt_after", "context")
            if (value := getattr(self.options, name)) is not None
        }

    @property
    def static_interrupts(self) -> bool:
        return bool(self.options.interrupt_before or self.options.interrupt_after)


def run_intent(journaled: Any) -> RunIntent | None:
    """A journaled run, read back as it was written (its options were parsed then)."""
    if not isinstance(journaled, dict) or journaled.get(INTENT_KEY) != RUN:
        return None
    return RunIntent(
        input=journaled.get("input"),
        options=RunOptions(
            command=journaled.get("command"),
            checkpoint_id=journaled.get("checkpoint_id"),
            interrupt_before=journaled.get("interrupt_before"),
            interrupt_after=journaled.get("interrupt_after"),
            stream=journaled.get("stream"),
            config=journaled.get("config"),
            context=journaled.get("context"),
            tokens=journaled.get("tokens"),
        ),
    )


def context_for(graph: Graph, context: dict[str, Any]) -> dict[str, Any]:
    """The keys of a run's context the graph's ``context_schema`` names, as
    LangGraph's server filters them (configurable and context mirror each other, so
    a context carries keys a dataclass schema would refuse); all of it when the
    graph names none."""
    try:
        schema = graph.get_context_jsonschema()
    except Exception:  # a schema LangGraph cannot describe: nothing to filter by
        return context
    properties = (schema or {}).get("properties")
    if not properties:
        return context
    return {k: v for k, v in context.items() if k in properties}


def parse_run(options: Any, payload: Any) -> RunIntent:
    """``responses/create``'s ``run`` param with its input: ValueError saying what is
    wrong (turnkeeper._run_request's rules, the service's too)."""
    return RunIntent(input=payload, options=parse_run_options(options, payload))


def is_regenerate(journaled: Any) -> bool:
    return isinstance(journaled, dict) and journaled == REGENERATE_INPUT


def is_reserved(payload: Any) -> bool:
    """An input ``responses/create`` refuses: it would read as a marker."""
    return isinstance(payload, dict) and INTENT_KEY in payload


def thread_config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


Graph = Pregel[Any, Any, Any, Any]


async def has_pending_work(graph: Graph, thread_id: str) -> bool:
    """The thread's latest checkpoint has nodes still to run (a run that failed,
    was cut short, or waits in an interrupt)."""
    try:
        state = await graph.aget_state(thread_config(thread_id))
    except PermissionDenied:
        # With tokens on, a thread that holds no turn of this agent is closed to it
        # (unknown, or another agent's): nothing of ours is pending there.
        return False
    return bool(state.next)


async def regenerate_point(graph: Graph, config: RunnableConfig) -> str | None:
    """The checkpoint a regenerate runs from (the latest run's input applied, no
    node run yet), on the thread of ``config``; None when there is none."""
    try:
        return await entry_checkpoint_id(graph, config)
    except PermissionDenied:
        return None
