"""The webhook settings `turnkeeper serve` takes (main.py's `--webhook-*` flags)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class WebhookSettings:
    # The deployment's signing secrets (signing.py); None: runs with a webhook are
    # refused (there is nothing to sign with).
    secret_file: Path | None = None
    # Addresses, networks and host names webhooks may reach besides public ones
    # (addresses.py).
    allow: tuple[str, ...] = ()
    # The largest body sent; a run whose values make it larger is sent without them
    # (`values_omitted`).
    max_body_bytes: int = 1024 * 1024
    # How long one attempt may take, connect to answer.
    timeout: float = 10.0
    # Retries: the n-th waits base * 2**(n-1) seconds, at most cap, and the delivery
    # gives up after max_attempts attempts.
    retry_base: float = 2.0
    retry_cap: float = 600.0
    max_attempts: int = 12
    # How often a replica looks for due deliveries, and how many it sends at once.
    poll: float = 0.5
    concurrency: int = 8

    @property
    def hold(self) -> float:
        """How long a claimed delivery stays held: its attempt's timeout and a half,
        and a second (past it, the attempt's replica is taken for dead)."""
        return self.timeout * 1.5 + 1.0
