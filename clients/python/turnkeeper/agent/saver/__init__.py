"""``RemoteSaver``, the LangGraph checkpointer that stores in the turnkeeper service,
and how to run a turn with it (:func:`durable_config`, :func:`durable_run_kwargs`).

The package's modules: :mod:`~turnkeeper.agent.saver._remote` (RemoteSaver, its
fencing, durability and transports), :mod:`~turnkeeper.agent.saver._wire` (requests
and replies, as SqliteSaver stores them), :mod:`~turnkeeper.agent.saver._stream` (the
checkpoint stream of a run), :mod:`~turnkeeper.agent.saver._channels` (the saver's
connections), :mod:`~turnkeeper.agent.saver._extended` (prune, copy, delete for runs)
and :mod:`~turnkeeper.agent.saver._identity` (the turn a run's config belongs to).
"""

from __future__ import annotations

from turnkeeper.agent.saver._remote import (
    ATTEMPT_KEY,
    DURABILITY,
    SHARE_ENV,
    STREAM_ENV,
    TURN_ID_KEY,
    DurableRunKwargs,
    RemoteSaver,
    durable_config,
    durable_run_kwargs,
)

__all__ = [
    "ATTEMPT_KEY",
    "DURABILITY",
    "SHARE_ENV",
    "STREAM_ENV",
    "TURN_ID_KEY",
    "DurableRunKwargs",
    "RemoteSaver",
    "durable_config",
    "durable_run_kwargs",
]
