"""What a turn's journaled input asks for: new input, a continuation, or a regenerate.

The journal keeps one JSON value per turn, its input, and a turn that dies before
its first checkpoint is started again from it alone. So the input carries the
turn's intent, and an execution reads it back the same way whether it is the first
one or a re-drive:

- ``null``: continue the thread from its latest checkpoint (``astream(None)``); the
  pending work of an earlier turn that failed or was cut short;
- ``{"__turnkeeper__": "regenerate"}`` (:data:`REGENERATE_INPUT`): reposition the
  thread to the entry node of its latest run (:mod:`turnkeeper.agent.reposition`), then
  run from there: the latest input is answered again;
- anything else: new input, handed to the bridge's ``input_mapper``.

An object with a top-level ``"__turnkeeper__"`` key is reserved for these markers;
``responses/create`` refuses one as ``input``.
"""

from __future__ import annotations

from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel

from turnkeeper.agent.reposition import entry_checkpoint_id
from turnkeeper.errors import PermissionDenied

INTENT_KEY: Final = "__turnkeeper__"
REGENERATE: Final = "regenerate"
#: The journaled input of a regenerate turn.
REGENERATE_INPUT: Final = {INTENT_KEY: REGENERATE}


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
