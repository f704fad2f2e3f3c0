"""A replica says which agent it serves, so the service lists the agent as an
assistant of its LangGraph API (docs/langgraph-api.md).

The announcement ``{agent, replica, incarnation, graph}`` goes to
``<prefix>.<ns>.agents.<agent>.announce`` once the bridge is subscribed, again every
:data:`EVERY` seconds (the service forgets an agent none of whose replicas announced
for three periods) and whenever the service asks on ``<prefix>.<ns>.discover`` (at
its start, so its list is whole at once). ``graph`` is the version the replica
serves (docs/versions.md): ``{"fingerprint": ..., "label": ..., "shape": {...}}``,
which the service lists (``turnkeeper agents``) and its version policies use. The
graph's LangGraph description is not in it: the service asks for that with
``langgraph/describe`` when a client wants it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Final

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = logging.getLogger(__name__)

EVERY: Final = 30.0


class Announcer:
    def __init__(
        self, subject: str, discover_subject: str, payload: dict[str, Any], every: float = EVERY
    ) -> None:
        self.subject = subject
        self.discover_subject = discover_subject
        self._fields = dict(payload)
        self.payload = json.dumps(payload).encode()
        # Said once at shutdown: the service drops this replica from its live list
        # at once, rather than after three silent periods (its version stops being
        # offered hand-offs, docs/versions.md).
        self.farewell = json.dumps({**payload, "leaving": True}).encode()
        self.every = every
        self._task: asyncio.Task[None] | None = None
        self._sub: Subscription | None = None
        self._nc: Client | None = None
        self._sending: set[asyncio.Task[None]] = set()

    def update(self, **fields: Any) -> None:
        """Change what the announcement says, and say it now (when connected)."""
        self._fields.update(fields)
        self.payload = json.dumps(self._fields).encode()
        nc = self._nc
        if nc is not None and nc.is_connected:
            task = asyncio.get_running_loop().create_task(self.announce(nc))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def start(self, nc: Client) -> None:
        """Announce now and from now on (once per connection: called when subscribed)."""
        self._nc = nc
        if self._sub is None:
            self._sub = await nc.subscribe(self.discover_subject, cb=self._asked)
        await self.announce(nc)
        if self._task is None:
            self._task = asyncio.create_task(self._repeat(nc), name="bridge-announce")

    async def announce(self, nc: Client) -> None:
        try:
            await nc.publish(self.subject, self.payload)
        except Exception as exc:  # NATS away: the next period announces again
            log.debug("announcement on %s not sent: %s", self.subject, exc)

    async def _asked(self, msg: Msg) -> None:
        await self.announce(msg._client)

    async def _repeat(self, nc: Client) -> None:
        while True:
            await asyncio.sleep(self.every)
            if nc.is_connected:
                await self.announce(nc)

    async def stop(self, nc: Client | None = None) -> None:
        """Stop announcing; with the connection, say that this replica is leaving."""
        self._nc = None
        if nc is not None and nc.is_connected:
            try:
                await nc.publish(self.subject, self.farewell)
                await nc.flush(timeout=1)
            except Exception as exc:  # the service forgets it after three periods anyway
                log.debug("farewell on %s not sent: %s", self.subject, exc)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._sub = None
