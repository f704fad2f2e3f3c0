"""An in-process Bridge's config for a test: against the test's service and NATS, a
health port of its own (port 0), and a short shutdown grace, so that a test's stop
does not wait out the default."""

from __future__ import annotations

from typing import Any

from turnkeeper.agent.bridge import BridgeConfig
from turnkeeper.client import ConnectionOptions


def bridge_config(
    agent: str, service: str, nats_url: str, replica: str, **changes: Any
) -> BridgeConfig:
    """`changes`: any other field of BridgeConfig (`max_turns=1`, ...)."""
    return BridgeConfig(
        agent=agent,
        service=ConnectionOptions(target=service),
        nats_url=nats_url,
        replica=replica,
        health_listen="127.0.0.1:0",
        shutdown_grace=1.0,
        **changes,
    )
