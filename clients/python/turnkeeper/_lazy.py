"""A package's public names imported on first use (PEP 562), for the packages that
export names from their submodules without loading them (``turnkeeper``,
``turnkeeper.agent``, ``turnkeeper.panel``): ``import turnkeeper.panel.follower``
must not load NATS, nor ``import turnkeeper`` grpc."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any


def exports(
    namespace: MutableMapping[str, Any], table: Mapping[str, str], public: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the module whose globals are `namespace`: a
    name in `table` is imported from the module it names on first use, then kept."""
    module_name = namespace["__name__"]

    def getattr_(name: str) -> Any:
        source = table.get(name)
        if source is None:
            raise AttributeError(f"module {module_name!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(public))

    return getattr_, dir_
