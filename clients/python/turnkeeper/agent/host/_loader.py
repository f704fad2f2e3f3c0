"""A graph named by a ``langgraph.json`` entry, loaded: a compiled graph, a
``StateGraph`` (compiled here), or a factory returning either (called with no
argument, or with a ``RunnableConfig`` if it takes one; it may be async)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from turnkeeper.agent.host._config import GraphSpec


def _module(spec: GraphSpec) -> ModuleType:
    if not spec.is_file:
        return importlib.import_module(spec.module)
    path = Path(spec.module)
    if not path.is_file():
        raise ValueError(f"graph {spec.name!r}: no file {path}")
    name = f"turnkeeper_graph_{spec.name.replace('-', '_')}"
    found = importlib.util.spec_from_file_location(name, path)
    if found is None or found.loader is None:
        raise ValueError(f"graph {spec.name!r}: cannot load {path}")
    module = importlib.util.module_from_spec(found)
    sys.modules[name] = module
    found.loader.exec_module(module)
    return module


async def load_graph(
    spec: GraphSpec,
) -> Pregel[Any, Any, Any, Any] | StateGraph[Any, Any, Any, Any]:
    """The graph itself (the bridge swaps in its own checkpointer)."""
    module = _module(spec)
    try:
        target = getattr(module, spec.attribute)
    except AttributeError:
        raise ValueError(
            f"graph {spec.name!r}: {spec.module} has no attribute {spec.attribute!r}"
        ) from None
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
