"""The agents that replicas say they serve: the LangGraph API's assistants.

Each bridge announces its agent on ``<prefix>.<ns>.agents.<agent>.announce`` when it
is subscribed and every 30 s after (turnkeeper.agent.bridge._announce); the service
asks every replica to announce at once on ``<prefix>.<ns>.discover`` each time it
connects to NATS, so its list is whole right after a start. The agent's name is
read from the subject, which NATS lets only that agent's own user publish to when
the service has tokens (messaging/credentials.py), so no agent can announce another.
An agent none of whose replicas announced for :data:`FORGET_AFTER` seconds is
forgotten (its replicas are gone; its turns stay).

Each announcement also says which replica it is and the graph version it serves
(``{"replica", "incarnation", "graph": {"fingerprint", "label", "shape"}}``,
docs/versions.md): the directory keeps the live replicas of each agent with their
versions, which the version policies route hand-offs by (engine/handoffs.py) and
``ListAgents`` shows. A body it cannot read still counts for the agent's name. A
replica says ``"leaving": true`` as it shuts down and is dropped at once; one that
says ``"assistant": false`` (the TypeScript runner, which serves no LangGraph API
methods) is kept with its version but does not make its agent an assistant; one that
crashed is dropped after FORGET_AFTER, and until then a hand-off to its version finds
no responder and is tried again at the next claim window.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nats.aio.client import Client
from nats.aio.msg import Msg

from turnkeeper_server import limits as lim
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.messaging.link import NatsLink

log = logging.getLogger(__name__)

# Three of the bridges' announcement periods.
FORGET_AFTER: Final = 90.0


@dataclass(frozen=True)
class Replica:
    """A live replica of an agent as it last announced itself."""

    replica: str
    incarnation: str
    fingerprint: str
    label: str
    shape: Mapping[str, Any] | None
    # When it was heard, on the directory's clock, and on the wall clock.
    seen: float
    announced_at: float
    # Its farewell at shutdown: no longer live.
    leaving: bool = False
    # False: it does not serve LangGraph's API methods (the TypeScript runner), so
    # its agent is not listed as an assistant.
    assistant: bool = True


def _replica(body: bytes, seen: float) -> Replica | None:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("replica"), str):
        return None
    graph: dict[str, Any] = data["graph"] if isinstance(data.get("graph"), dict) else {}
    shape = graph.get("shape")
    return Replica(
        replica=data["replica"],
        incarnation=str(data.get("incarnation") or ""),
        fingerprint=str(graph.get("fingerprint") or ""),
        label=str(graph.get("label") or ""),
        shape=shape if isinstance(shape, dict) else None,
        seen=seen,
        announced_at=time.time(),
        leaving=data.get("leaving") is True,
        assistant=data.get("assistant") is not False,
    )


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
        self._replicas: dict[str, dict[str, Replica]] = {}
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
        replica = _replica(msg.data, self.clock())
        if replica is None or replica.assistant:
            if agent not in self._seen:
                log.info("agent %s announced: listed as an assistant", agent)
            self._seen[agent] = self.clock()
        if replica is None:
            return
        known = self._replicas.setdefault(agent, {})
        if replica.leaving:
            # A replica shutting down; a newer incarnation of it may already be back.
            if (old := known.get(replica.replica)) and old.incarnation == replica.incarnation:
                del known[replica.replica]
            return
        known[replica.replica] = replica

    def replicas(self, agent: str) -> list[Replica]:
        """The agent's replicas heard within the last FORGET_AFTER seconds, by name."""
        horizon = self.clock() - self.forget_after
        known = self._replicas.get(agent, {})
        for name in [n for n, r in known.items() if r.seen < horizon]:
            del known[name]
        return [known[n] for n in sorted(known)]

    def known_agents(self) -> list[str]:
        """Agents with a replica announced within FORGET_AFTER seconds, by name."""
        return [a for a in sorted(self._replicas) if self.replicas(a)]

    def heard(self, agent: str) -> None:
        """An agent that answered a request directly (it is being served now)."""
        self._seen[agent] = self.clock()

    def agents(self) -> list[str]:
        """The agents announced within the last FORGET_AFTER seconds, by name."""
        horizon = self.clock() - self.forget_after
        for agent in [a for a, seen in self._seen.items() if seen < horizon]:
            del self._seen[agent]
        return sorted(self._seen)
