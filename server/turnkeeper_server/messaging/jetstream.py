"""The JetStream stream over the mirrored subjects (opt-in, ``--jetstream``).

Every outbox message carries its outbox id as ``Nats-Msg-Id``. Core NATS ignores
it, so the one duplicate left by the outbox (a batch published, then the connection
lost before the flush proved it arrived: the rows stay and go out again) reaches
subscribers twice. A stream with a duplicate window drops the second copy, and keeps
a turn's events for a subscriber that comes late.

The stream is made sure of on every connection to NATS, before the outbox may
publish on it, so nothing is mirrored outside the stream once it is asked for.
Replicas do this concurrently: creating a stream that exists with the same settings
succeeds, and one whose settings differ is updated to cover ours.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Final

from nats.aio.client import Client
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import StreamConfig
from nats.js.errors import BadRequestError, NotFoundError, ServiceUnavailableError

log = logging.getLogger(__name__)

# Long enough to cover a publish and its re-publish after a lost connection (the
# link redials within seconds; a NATS outage of minutes is covered too, since the
# backlog waits in the outbox, not in the window). JetStream keeps one id per
# message inside the window, so longer is not free.
DEFAULT_DUPLICATE_WINDOW: Final = 300.0
# Stream names may not hold '.', '*', '>' or white space.
_NOT_IN_NAME: Final = re.compile(r"[^A-Za-z0-9_-]")


def stream_name(prefix: str) -> str:
    """``TURNKEEPER_<PREFIX>``: one stream per subject prefix."""
    return "TURNKEEPER_" + _NOT_IN_NAME.sub("_", prefix).upper()


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """The stream the service needs: its name, subjects and duplicate window."""

    prefix: str
    duplicate_window: float = DEFAULT_DUPLICATE_WINDOW

    def __post_init__(self) -> None:
        if not self.duplicate_window > 0:
            raise ValueError(
                f"--jetstream-duplicate-window must be a positive number of seconds, "
                f"not {self.duplicate_window}"
            )

    @property
    def name(self) -> str:
        return stream_name(self.prefix)

    @property
    def subject(self) -> str:
        return f"{self.prefix}.turn.>"

    def config(self) -> StreamConfig:
        return StreamConfig(
            name=self.name,
            description="turnkeeper's mirrored turn events and rewinds",
            subjects=[self.subject],
            duplicate_window=self.duplicate_window,
        )


class JetStreamUnavailable(RuntimeError):
    """The NATS server cannot hold the stream (JetStream off, or refused)."""


async def ensure_stream(nc: Client, spec: StreamSpec) -> None:
    """Create the stream, or widen an existing one to the subject and window needed.

    Raises JetStreamUnavailable with what to do when the server has no JetStream.
    """
    js = nc.jetstream()
    try:
        await js.add_stream(spec.config())
        log.info(
            "JetStream stream %s over %s (duplicate window %.0fs)",
            spec.name,
            spec.subject,
            spec.duplicate_window,
        )
        return
    except (ServiceUnavailableError, NotFoundError, NatsTimeout) as exc:
        # No responder on $JS.API: the server runs without JetStream.
        raise JetStreamUnavailable(_advice(nc, exc)) from exc
    except BadRequestError as exc:
        # Usually: the stream exists with other settings (made by an operator, or
        # with another window). Keep its settings and add what we need.
        existing_error: BadRequestError = exc
    try:
        info = await js.stream_info(spec.name)
    except NotFoundError as exc:
        raise JetStreamUnavailable(f"{_advice(nc, exc)} ({existing_error})") from exc
    config = info.config
    subjects = list(config.subjects or [])
    changed = False
    if spec.subject not in subjects:
        subjects.append(spec.subject)
        changed = True
    if (config.duplicate_window or 0) < spec.duplicate_window:
        config.duplicate_window = spec.duplicate_window
        changed = True
    if changed:
        config.subjects = subjects
        try:
            await js.update_stream(config)
        except BadRequestError as exc:
            raise JetStreamUnavailable(
                f"JetStream stream {spec.name} exists and cannot be updated to cover "
                f"{spec.subject} with a {spec.duplicate_window:.0f}s duplicate window: {exc}"
            ) from exc
        log.info("JetStream stream %s updated to cover %s", spec.name, spec.subject)


def _advice(nc: Client, exc: Exception) -> str:
    url = nc.connected_url
    server = url.netloc if url is not None and url.netloc else "the NATS server"
    return (
        f"--jetstream: {server} has no JetStream ({type(exc).__name__}); start nats-server with -js "
        "(or enable jetstream in its config), or run without --jetstream"
    )
