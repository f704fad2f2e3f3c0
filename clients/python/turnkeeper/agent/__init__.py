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

from typing import TYPE_CHECKING

from turnkeeper import _lazy

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


__getattr__, __dir__ = _lazy.exports(globals(), _LAZY, __all__)
