"""A graph named by a ``langgraph.json`` entry, loaded: a compiled graph, a
``StateGraph`` (compiled here), or a factory returning either (called with no
argument, or with a ``RunnableConfig`` if it takes one; it may be async)."""

from __future__ import annotations

import inspect
from typing import Any

from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from turnkeeper._object_spec import ObjectSpec, load_object
from turnkeeper.agent.host._config import GraphSpec


async def load_graph(
    spec: GraphSpec,
) -> Pregel[Any, Any, Any, Any] | StateGraph[Any, Any, Any, Any]:
    """The graph itself (the bridge swaps in its own checkpointer)."""
    # read_config parsed the spec (a file's path made absolute there).
    named = ObjectSpec(f"{spec.module}:{spec.attribute}", spec.module, spec.attribute, spec.is_file)
    target = load_object(
        named,
        what=f"graph {spec.name!r}",
        name=f"turnkeeper_graph_{spec.name.replace('-', '_')}",
    )
    if isinstance(target, Pregel | StateGraph):
        return target
    if callable(target):
        takes_config = bool(inspect.signature(target).parameters)
        made = target({"configurable": {}}) if takes_config else target()
        if inspect.isawaitable(made):
            made = await made
        if isinstance(made, Pregel | StateGraph):
            return made
        raise ValueError(
            f"graph {spec.name!r}: the factory {spec.attribute} returned "
            f"{type(made).__name__}, not a graph"
        )
    raise ValueError(
        f"graph {spec.name!r}: {spec.attribute} is a {type(target).__name__}, "
        "not a graph or a function making one"
    )
