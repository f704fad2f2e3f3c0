"""Exactly-once effects (docs/effects.md): ``@effect`` on a function that acts on the
world makes each of its calls within a turn happen once, recorded in the turn's
effect ledger in the service; ``effect_key()`` is the running call's idempotency
key. The modules: :mod:`~turnkeeper.agent.effect._decorator` (the call's steps and
the uncertain policies), :mod:`~turnkeeper.agent.effect._key` (the key's derivation
and what breaks it), :mod:`~turnkeeper.agent.effect._model` (a chat model's replies
as effects, opt-in) and :mod:`~turnkeeper.agent.effect._errors`."""

from __future__ import annotations

from turnkeeper.agent.effect._decorator import UNCERTAIN_INTERRUPT, Policy, effect, effect_key
from turnkeeper.agent.effect._errors import (
    EffectError,
    EffectFailed,
    EffectOutsideRemoteSaver,
    EffectUncertain,
)
from turnkeeper.agent.effect._model import ModelReplies, journal_replies

__all__ = [
    "UNCERTAIN_INTERRUPT",
    "EffectError",
    "EffectFailed",
    "EffectOutsideRemoteSaver",
    "EffectUncertain",
    "ModelReplies",
    "Policy",
    "effect",
    "effect_key",
    "journal_replies",
]
