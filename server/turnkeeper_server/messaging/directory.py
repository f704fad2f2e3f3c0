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
``ListAgents`` shows; and its admission (``"max_turns"``, ``"full"``: every slot
taken), which Turn.detail reports for a turn that waits for a slot. A body it cannot
read still counts for the agent's name. A
replica says ``"leaving": true`` as it shuts down and is dropped at once; one that
says ``"assistant": false`` (the TypeScript runner, which serves no LangGraph API
methods) is kept with its version but does not make its agent an assistant; one that
crashed is dropped after FORGET_AFTER, and until then a hand-off to its version finds
no responder and is tried again at the next claim window.

What an agent's announcements may hold is bounded (decision 275), so no agent's
replicas grow the service without limit: a body over MAX_ANNOUNCEMENT_BYTES is
refused unread; an agent keeps at most MAX_REPLICAS live replicas and MAX_VERSIONS
graph versions (fingerprints) among them, and an announcement past either is
refused; replicas of one version share one shape, the first one heard (the
fingerprint is the shape's digest, so a replica of that version has that shape).
Each refusal is logged, at most one line a second with a count.
"""

from __future__ import annotations

import dataclasses
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
from turnkeeper_server.log_rate import LogRate
from turnkeeper_server.messaging.link import NatsLink

log = logging.getLogger(__name__)

# Three of the bridges' announcement periods.
FORGET_AFTER: Final = 90.0
# A body is a shape (at most limits.MAX_SHAPE_BYTES, as the journal takes) and names.
MAX_ANNOUNCEMENT_BYTES: Final = lim.MAX_SHAPE_BYTES + (16 << 10)
# Live replicas of one agent, and graph versions among them (each version keeps one
# shape): at most MAX_VERSIONS * MAX_ANNOUNCEMENT_BYTES of shapes per agent.
MAX_REPLICAS: Final = 256
MAX_VERSIONS: Final = 8


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
    # Its admission limit (0: none, or not said) and whether every slot is taken, so
    # that turns wait for one (turnkeeper.agent.bridge._admission).
    max_turns: int = 0
    full: bool = False
    # It runs a hand-off that carries its claim without ClaimTurn, on its own
    # subject (``"claims": true``, decision 590); older replicas and the
    # TypeScript runner do not say it and keep the queue group's hand-offs.
    claims: bool = False


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
        max_turns=max_turns if isinstance(max_turns := data.get("max_turns"), int) else 0,
        full=data.get("full") is True,
        claims=data.get("claims") is True,
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
        # Announcements refused for a bound, logged at most once a second.
        self.refusals = LogRate(log)
        #: Called with the agent's name each time an agent is listed as an assistant.
        self.on_listed: list[Callable[[str], None]] = []
        #: Called with the agent's name after each announcement it keeps (an
        #: assistant's or not, a farewell too), once the directory shows it: what a
        #: waiter on a replica's state (its version, its free slots) awaits.
        self.on_heard: list[Callable[[str], None]] = []
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
        if len(msg.data) > MAX_ANNOUNCEMENT_BYTES:
            self.refusals.warning(
                "agent %s: refused an announcement of %d bytes, unread (at most %d)",
                agent,
                len(msg.data),
                MAX_ANNOUNCEMENT_BYTES,
            )
            return
        replica = _replica(msg.data, self.clock())
        if replica is not None and not replica.leaving:
            replica = self._bounded(agent, replica)
            if replica is None:
                return
        if replica is None or replica.assistant:
            if agent not in self._seen:
                log.info("agent %s announced: listed as an assistant", agent)
            self._seen[agent] = self.clock()
            for listed in self.on_listed:
                listed(agent)
        if replica is not None:
            known = self._replicas.setdefault(agent, {})
            if not replica.leaving:
                known[replica.replica] = replica
            # A replica shutting down; a newer incarnation of it may already be back.
            elif (old := known.get(replica.replica)) and old.incarnation == replica.incarnation:
                del known[replica.replica]
        for heard in self.on_heard:
            heard(agent)

    def _bounded(self, agent: str, replica: Replica) -> Replica | None:
        """`replica` with its version's shared shape, or None (logged) when keeping
        it would pass MAX_REPLICAS or MAX_VERSIONS for its agent."""
        known = {r.replica: r for r in self.replicas(agent) if r.replica != replica.replica}
        if len(known) >= MAX_REPLICAS:
            self.refusals.warning(
                "agent %s: refused the announcement of replica %r: it has %d live "
                "replicas already (at most %d)",
                agent,
                replica.replica,
                len(known),
                MAX_REPLICAS,
            )
            return None
        same = next((r for r in known.values() if r.fingerprint == replica.fingerprint), None)
        if same is not None:
            return dataclasses.replace(replica, shape=same.shape)
        versions = {r.fingerprint for r in known.values()}
        if len(versions) >= MAX_VERSIONS:
            self.refusals.warning(
                "agent %s: refused the announcement of replica %r: its replicas serve "
                "%d graph versions already (at most %d)",
                agent,
                replica.replica,
                len(versions),
                MAX_VERSIONS,
            )
            return None
        return replica

    def replicas(self, agent: str) -> list[Replica]:
        """The agent's replicas heard within the last FORGET_AFTER seconds, by name."""
        horizon = self.clock() - self.forget_after
        known = self._replicas.get(agent, {})
        for name in [n for n, r in known.items() if r.seen < horizon]:
            del known[name]
        return [known[n] for n in sorted(known)]

    def full(self, agent: str) -> list[Replica]:
        """The agent's live replicas, when every one of them has every slot taken (a
        turn nobody owns waits for a free one); empty otherwise."""
        live = self.replicas(agent)
        return live if live and all(r.full for r in live) else []

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
