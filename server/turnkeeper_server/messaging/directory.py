"""The agents that replicas say they serve: the LangGraph API's assistants.

Each bridge announces its agent on ``<prefix>.<ns>.agents.<agent>.announce`` when it
is subscribed and every 30 s after (turnkeeper.agent.bridge.announce); the service
asks every replica to announce at once on ``<prefix>.<ns>.discover`` each time it
connects to NATS, so its list is whole right after a start. The agent's name is
read from the subject, which NATS lets only that agent's own user publish to when
the service has tokens (messaging/credentials.py), so no agent can announce another.
An agent none of whose replicas announced for :data:`FORGET_AFTER` seconds is
forgotten (its replicas are gone; its turns stay).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Final

from nats.aio.client import Client
from nats.aio.msg import Msg

from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.messaging.link import NatsLink

log = logging.getLogger(__name__)

# Three of the bridges' announcement periods.
FORGET_AFTER: Final = 90.0


class AgentDirectory:
    def __init__(
        self,
        link: NatsLink,
        *,
        prefix: str,
        namespace: str,
        forget_after: float = FORGET_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.prefix = prefix
        self.namespace = namespace
        self.forget_after = forget_after
        self.clock = clock
        self._seen: dict[str, float] = {}
        link.on_connect.append(self._connected)

    @property
    def announce_subjects(self) -> str:
        return f"{self.prefix}.{self.namespace}.agents.*.announce"

    @property
    def discover_subject(self) -> str:
        return f"{self.prefix}.{self.namespace}.discover"

    async def _connected(self, nc: Client) -> None:
        await nc.subscribe(self.announce_subjects, cb=self._heard)
        await nc.publish(self.discover_subject, b"{}")

    async def _heard(self, msg: Msg) -> None:
        parts = msg.subject.split(".")
        try:
            agent = lim.check_agent(parts[-2])
        except (IndexError, InvalidArgument):
            return
        if agent not in self._seen:
            log.info("agent %s announced: listed as an assistant", agent)
        self._seen[agent] = self.clock()

    def heard(self, agent: str) -> None:
        """An agent that answered a request directly (it is being served now)."""
        self._seen[agent] = self.clock()

    def agents(self) -> list[str]:
        """The agents announced within the last FORGET_AFTER seconds, by name."""
        horizon = self.clock() - self.forget_after
        for agent in [a for a, seen in self._seen.items() if seen < horizon]:
            del self._seen[agent]
        return sorted(self._seen)
