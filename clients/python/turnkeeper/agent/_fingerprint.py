"""The shape and fingerprint of a compiled LangGraph graph (docs/versions.md).

What the shape covers, and nothing else (so a change elsewhere, a node's body or a
prompt, keeps the fingerprint; the author says so with a label):

- ``nodes``: every node of the compiled graph by name, with the channels that
  trigger it and the channels it reads;
- ``edges``: the builder's fixed edges (``[start, end]``) and waiting edges (several
  starts, one end);
- ``branches``: each conditional edge by source node and branch name, with its
  declared targets (``null`` when the branch declared none: it may go anywhere);
- ``channels``: every channel of the compiled graph, LangGraph's own included (a
  checkpoint holds them), with its reducer kind: the channel class, and for a reducer
  channel the reducer function's module and qualified name;
- ``state``: the state schema's fields and their types as names (an ``Annotated``
  type by its base type: the reducer is in ``channels``);
- ``input`` / ``output``: the input and output channels;
- ``interrupt_before`` / ``interrupt_after``: the static interrupt points.

Functions are described by module and qualified name only, never by identity or
address, so the shape is the same in every process. A graph without a builder
(``Pregel`` made by hand, the functional API) is described by its compiled parts.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping
from typing import Any, Final

from langgraph.pregel import Pregel

from turnkeeper._graph_versions import SHAPE_FORMAT, Stamp, fingerprint

AnyGraph = Pregel[Any, Any, Any, Any]

# An object's repr may carry its address; a shape never does.
_ADDRESS: Final = re.compile(r" at 0x[0-9a-fA-F]+")
_ACCELERATED: Final = {"_operator": "operator", "_functools": "functools"}


def _function_name(fn: Any) -> str:
    fn = getattr(fn, "func", None) or fn  # RunnableCallable and partials keep theirs here
    module = getattr(fn, "__module__", None) or ""
    # The C accelerator's module is an implementation detail of the same function.
    module = _ACCELERATED.get(module, module)
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if name is None:
        return _ADDRESS.sub("", type(fn).__qualname__)
    return f"{module}.{name}" if module and module != "builtins" else str(name)


def _type_name(tp: Any) -> str:
    """A type as a name that does not depend on the process."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in args)
        return f"{_type_name(origin)}[{inner}]" if args else _type_name(origin)
    if tp is None or tp is type(None):
        return "None"
    if isinstance(tp, type):
        module = tp.__module__
        return (
            tp.__qualname__ if module in ("builtins", "typing") else f"{module}.{tp.__qualname__}"
        )
    return _ADDRESS.sub("", repr(tp))


def _schema_fields(schema: Any) -> dict[str, str]:
    if schema is None:
        return {}
    if dataclasses.is_dataclass(schema) and isinstance(schema, type):
        hints = {f.name: f.type for f in dataclasses.fields(schema)}
    elif hasattr(schema, "model_fields"):  # pydantic
        hints = {name: f.annotation for name, f in schema.model_fields.items()}
    else:
        try:
            hints = typing.get_type_hints(schema, include_extras=True)
        except Exception:
            hints = dict(getattr(schema, "__annotations__", {}) or {})
    return {name: _type_name(tp) for name, tp in sorted(hints.items())}


def reducer_kind(channel: Any) -> str:
    """``LastValue``, ``BinaryOperatorAggregate(operator.add)`` ..."""
    kind = type(channel).__qualname__
    operator = getattr(channel, "operator", None)
    return f"{kind}({_function_name(operator)})" if operator is not None else kind


def _names(value: Any) -> list[str] | str:
    if value == "*" or value == ["*"]:
        return "*"
    if isinstance(value, str):
        return [value]
    return sorted(str(v) for v in value or ())


def graph_shape(graph: AnyGraph) -> dict[str, Any]:
    """The JSON shape of a compiled graph (the module docstring says what is in it)."""
    nodes = {
        name: {
            "triggers": sorted(node.triggers),
            "reads": _names(node.channels),
        }
        for name, node in sorted(graph.nodes.items())
    }
    channels = {name: reducer_kind(ch) for name, ch in sorted(graph.channels.items())}
    shape: dict[str, Any] = {
        "format": SHAPE_FORMAT,
        "nodes": nodes,
        "channels": channels,
        "input": _names(graph.input_channels),
        "output": _names(graph.output_channels),
        "interrupt_before": _names(graph.interrupt_before_nodes),
        "interrupt_after": _names(graph.interrupt_after_nodes),
        "edges": [],
        "branches": {},
        "state": {},
    }
    builder = getattr(graph, "builder", None)
    if builder is not None:
        shape["edges"] = sorted(
            [[start, end] for start, end in getattr(builder, "edges", ())]
            + [[sorted(starts), end] for starts, end in getattr(builder, "waiting_edges", ())],
            key=str,
        )
        branches: dict[str, dict[str, Any]] = {}
        for source, specs in sorted((getattr(builder, "branches", None) or {}).items()):
            branches[source] = {
                name: (sorted(set(spec.ends.values())) if spec.ends else None)
                for name, spec in sorted(specs.items())
            }
        shape["branches"] = branches
        shape["state"] = _schema_fields(getattr(builder, "state_schema", None))
    return shape


@dataclasses.dataclass(frozen=True)
class GraphVersion:
    """A graph's shape, its author's label, and their fingerprint."""

    shape: Mapping[str, Any]
    label: str
    fingerprint: str

    @classmethod
    def of(cls, graph: AnyGraph, label: str = "") -> GraphVersion:
        shape = graph_shape(graph)
        return cls(shape, label, fingerprint(shape, label))

    def stamp(self, checkpoint: Mapping[str, Any]) -> Stamp:
        """What a checkpoint of this graph records about its code (graph_versions)."""
        nodes: Mapping[str, Any] = self.shape["nodes"]
        channels: Mapping[str, str] = self.shape["channels"]
        versions: Mapping[str, Any] = checkpoint.get("channel_versions") or {}
        seen: Mapping[str, Mapping[str, Any]] = checkpoint.get("versions_seen") or {}
        values: Mapping[str, Any] = checkpoint.get("channel_values") or {}
        # A node runs next when a channel that triggers it holds a value written
        # since the node last ran: LangGraph's own rule (pregel's
        # prepare_next_tasks), read from the checkpoint alone. An interrupted node
        # has not recorded its run, so it is in it too.
        upcoming = [
            name
            for name, node in nodes.items()
            if any(
                ch in values and ch in versions and _newer(versions[ch], seen.get(name, {}).get(ch))
                for ch in node["triggers"]
            )
        ]
        held = {ch: channels[ch] for ch in values if ch in channels}
        return Stamp(self.fingerprint, self.label, tuple(sorted(upcoming)), held)


def _newer(version: Any, seen: Any) -> bool:
    if seen is None:
        return True
    try:
        return bool(version > seen)
    except TypeError:
        return str(version) > str(seen)
