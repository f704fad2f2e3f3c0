"""Graph versions: the fingerprint of a graph's shape, and whether a checkpoint written
by one version can continue on another (docs/versions.md).

A *shape* is the JSON description of what decides whether a LangGraph checkpoint can
continue on a compiled graph: its nodes and what triggers each, its edges and
conditional branches (by name and target, never by function identity), its channels
and their reducer kinds, the state schema's fields and types (as names), and its
static interrupt points. :mod:`turnkeeper.agent._fingerprint` makes one from a compiled
graph; this module needs no LangGraph, so the service and the replay check use it too.

The *fingerprint* is the SHA-256 of the canonical JSON of ``{"label": ..., "shape":
...}``: the same graph and label give the same fingerprint in every process and every
Python run. The label is the author's own version name; it is in the fingerprint
because two versions with one shape may still behave differently (a node's body
changed), and only the author can say so.

A *stamp* is what a checkpoint records about the code that wrote it (in its metadata,
under ``turnkeeper`` → ``graph``): that code's fingerprint and label, the nodes the
checkpoint would run next, and the channels it holds with their reducer kinds. The
``compatible`` rule compares a stamp with a new shape alone: every node named in
``next`` exists in the new shape, and every channel held exists there with the same
reducer kind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

# The shape's own format: bumped if what a shape describes changes, so fingerprints
# of different formats never compare equal by accident.
SHAPE_FORMAT: Final = 1
# The checkpoint metadata key, inside the bridge's ``turnkeeper`` mark, of the stamp.
STAMP_KEY: Final = "graph"
# LangGraph's own channels and nodes: present in every graph, never a difference.
_RESERVED_NODES: Final = frozenset({"__start__", "__end__"})


def canonical(value: Any) -> str:
    """The one JSON text of a value: sorted keys, no spaces, ASCII."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def fingerprint(shape: Mapping[str, Any], label: str = "") -> str:
    """The version's fingerprint: SHA-256 (hex) of the shape and the label."""
    text = canonical({"label": label, "shape": shape})
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def short(fp: str) -> str:
    """The first 12 hex digits, as lists and messages show a fingerprint."""
    return fp[:12]


def describe(fp: str, label: str) -> str:
    """``abc123def456 (label "v2")``, or the short fingerprint alone."""
    return f'{short(fp)} (label "{label}")' if label else short(fp)


@dataclass(frozen=True)
class Stamp:
    """What a checkpoint records about the code that wrote it."""

    fingerprint: str
    label: str
    # Nodes the checkpoint would run next (pending tasks, an interrupted node).
    next: tuple[str, ...]
    # Channels holding a value in the checkpoint -> their reducer kind.
    channels: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "fingerprint": self.fingerprint,
            "label": self.label,
            "next": list(self.next),
            "channels": dict(self.channels),
        }

    @classmethod
    def from_json(cls, data: Any) -> Stamp | None:
        """The stamp in a checkpoint's metadata, or None when it has none (written by
        a bridge from before versions, or by a plain RemoteSaver)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("fingerprint"), str):
            return None
        channels = data.get("channels")
        return cls(
            fingerprint=data["fingerprint"],
            label=str(data.get("label") or ""),
            next=tuple(str(n) for n in data.get("next") or ()),
            channels={str(k): str(v) for k, v in channels.items()}
            if isinstance(channels, Mapping)
            else {},
        )


def stamp_of_metadata(metadata: Any) -> Stamp | None:
    """The stamp of a checkpoint from its metadata (a dict or its JSON text)."""
    if isinstance(metadata, (str, bytes)):
        try:
            metadata = json.loads(metadata or "{}")
        except ValueError:
            return None
    if not isinstance(metadata, Mapping):
        return None
    mark = metadata.get("turnkeeper")
    return Stamp.from_json(mark.get(STAMP_KEY)) if isinstance(mark, Mapping) else None


def incompatibilities(stamp: Stamp, shape: Mapping[str, Any]) -> list[str]:
    """Why a checkpoint with this stamp cannot continue on a graph of this shape,
    one sentence each; empty when it can (the ``compatible`` rule)."""
    nodes = shape.get("nodes") or {}
    channels = shape.get("channels") or {}
    reasons: list[str] = []
    for node in stamp.next:
        if node not in nodes and node not in _RESERVED_NODES:
            reasons.append(f"node {node!r} is to run next but the new graph has no such node")
    for channel, kind in sorted(stamp.channels.items()):
        if channel not in channels:
            reasons.append(
                f"channel {channel!r} holds a value but the new graph has no such channel"
            )
        elif channels[channel] != kind:
            reasons.append(
                f"channel {channel!r} changed its reducer from {kind} to {channels[channel]}"
            )
    return reasons
