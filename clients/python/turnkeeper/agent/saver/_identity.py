"""The turn a run's config belongs to: the (turn_id, attempt) that
:func:`~turnkeeper.agent.saver.durable_config` puts in ``config["configurable"]``.

One reading for everything keyed by it: the fence a checkpoint or a write carries
(:mod:`turnkeeper.agent.saver._wire`), the checkpoint stream a run's operations go on
(:mod:`turnkeeper.agent.saver._stream`), the event log the bridge flushes before a
checkpoint (``turnkeeper.agent.bridge._boundary``) and a tool's idempotency key
(``turnkeeper.agent.bridge._idempotency``).
"""

from __future__ import annotations

from typing import Final, NamedTuple

from langchain_core.runnables import RunnableConfig

# The configurable keys that tie a checkpoint to a turn (and fence it).
TURN_ID_KEY: Final = "turn_id"
ATTEMPT_KEY: Final = "attempt"


class TurnIdentity(NamedTuple):
    turn_id: str
    attempt: int


def turn_identity(config: RunnableConfig) -> TurnIdentity | None:
    """The (turn_id, attempt) ``config`` carries; None for a run outside a turn (no
    or an empty ``turn_id``, or no ``attempt``), whose writes are not fenced."""
    configurable = config.get("configurable") or {}
    turn_id, attempt = configurable.get(TURN_ID_KEY), configurable.get(ATTEMPT_KEY)
    if not turn_id or attempt is None:
        return None
    return TurnIdentity(str(turn_id), int(attempt))
