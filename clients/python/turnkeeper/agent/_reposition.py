"""Agent side of ``regenerate``: find where the thread's latest run stood at the
graph's entry, so the run can be made again from there.

LangGraph writes a checkpoint with ``source: "input"`` when a run's input arrives
(``next`` is ``__start__``), then one per superstep; the first of those (step 0) is
the input applied and no node run yet: ``next`` is the entry node(s). Running the
graph with input None from that checkpoint forks the thread there, and the fork's
newest checkpoint becomes the thread's latest: the last question is answered again,
and the old answer is left in the history, off the thread's current line.

    checkpoint_id = await entry_checkpoint_id(graph, config)
    if checkpoint_id is not None:
        config = at_checkpoint(config, checkpoint_id)
    await graph.ainvoke(None, config)

It needs only the checkpointer's history, so it works with any graph and saver.
"""

from __future__ import annotations

from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel

__all__ = ["at_checkpoint", "entry_checkpoint_id"]


async def entry_checkpoint_id(
    graph: Pregel[Any, Any, Any, Any], config: RunnableConfig
) -> str | None:
    """The id of the checkpoint right after the latest run's input, on the thread
    of ``config``; None when the thread has no run to go back to."""
    newer: Any = None
    async for snapshot in graph.aget_state_history(config):
        source = (snapshot.metadata or {}).get("source")
        if source == "input":
            if newer is None:
                return None  # the input is all there is: nothing ran after it
            checkpoint_id = (newer.config.get("configurable") or {}).get("checkpoint_id")
            return str(checkpoint_id) if checkpoint_id else None
        newer = snapshot
    return None


def at_checkpoint(config: RunnableConfig, checkpoint_id: str) -> RunnableConfig:
    """``config`` pointed at ``checkpoint_id`` (same thread and namespace)."""
    configurable = dict(config.get("configurable") or {})
    configurable["checkpoint_id"] = checkpoint_id
    return {**config, "configurable": configurable}
