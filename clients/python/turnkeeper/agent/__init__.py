"""The agent side (extra ``agent``): ``RemoteSaver`` (``turnkeeper.agent.saver``),
exactly-once effects (``turnkeeper.agent.effect``), the NATS bridge
(``turnkeeper.agent.bridge``) and the host of a ``langgraph.json``
(``turnkeeper.agent.host``, ``python -m turnkeeper.agent.host``).

The names below are those subpackages' main ones, imported on first use (PEP 562),
so that ``turnkeeper.agent.RemoteSaver`` loads LangGraph but not NATS, which only the
bridge needs. (The ``@effect`` decorator is ``turnkeeper.agent.effect.effect``: here
``effect`` is its subpackage.) Modules whose name starts with ``_`` are private.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from turnkeeper.agent.bridge import Bridge, BridgeConfig, idempotency_key
    from turnkeeper.agent.effect import (
        EffectError,
        EffectFailed,
        EffectUncertain,
        effect_key,
        journal_replies,
    )
    from turnkeeper.agent.saver import RemoteSaver, durable_config, durable_run_kwargs

__all__ = [
    "Bridge",
    "BridgeConfig",
    "EffectError",
    "EffectFailed",
    "EffectUncertain",
    "RemoteSaver",
    "durable_config",
    "durable_run_kwargs",
    "effect_key",
    "idempotency_key",
    "journal_replies",
]

_LAZY: dict[str, str] = {
    "Bridge": "turnkeeper.agent.bridge",
    "BridgeConfig": "turnkeeper.agent.bridge",
    "idempotency_key": "turnkeeper.agent.bridge",
    "EffectError": "turnkeeper.agent.effect",
    "EffectFailed": "turnkeeper.agent.effect",
    "EffectUncertain": "turnkeeper.agent.effect",
    "effect_key": "turnkeeper.agent.effect",
    "journal_replies": "turnkeeper.agent.effect",
    "RemoteSaver": "turnkeeper.agent.saver",
    "durable_config": "turnkeeper.agent.saver",
    "durable_run_kwargs": "turnkeeper.agent.saver",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
