"""Which live replicas may take a turn, by graph version (docs/versions.md).

The rule itself is journal/versions.py's, applied where a replica takes a turn
(ClaimTurn, the startup Redrive). Here it meets the replicas alive now, as they
announce themselves (messaging/directory.py): a hand-off of a turn whose version
matters goes to the subject of a version that may take it, so a replica of another
version never receives it and cannot starve the right one (a plain queue group would
hand it to any member, which would only refuse it); a turn no live replica may take
waits, and says for which version (Turn.detail, Turn.waiting_for, ListAgents).
"""

from __future__ import annotations

from dataclasses import dataclass

from turnkeeper_server.journal import versions
from turnkeeper_server.journal.versions import Requirement, Served, VersionPolicies
from turnkeeper_server.messaging.directory import AgentDirectory, Replica
from turnkeeper_server.records import RUNNING, TurnRecord
from turnkeeper_server.store.contract import Store


@dataclass(frozen=True)
class Route:
    """Where a hand-off of a turn goes: any replica of the agent (`fingerprint` None),
    the replicas of one version, or nowhere yet (`waiting` set)."""

    fingerprint: str | None = None
    waiting: Requirement | None = None


@dataclass(frozen=True)
class Waiting:
    """A turn no live replica may take, and why."""

    turn: TurnRecord
    need: Requirement
    detail: str


def served(replica: Replica) -> Served:
    return Served(replica.fingerprint, replica.label, replica.shape)


class Versions:
    """The version policies applied to the live replicas of each agent."""

    def __init__(self, db: Store, directory: AgentDirectory, policies: VersionPolicies) -> None:
        self.db = db
        self.directory = directory
        self.policies = policies
        # Turns handed with their claim, per agent: the next replica to take one.
        self._next: dict[str, int] = {}

    def requirement(self, turn: TurnRecord) -> Requirement | None:
        return versions.requirement(self.db.read_conn(), self.db.checkpoints, turn)

    def route(self, turn: TurnRecord) -> Route:
        """Where to hand `turn` now."""
        policy = self.policies.of(turn.agent)
        if policy == versions.LATEST:
            return Route()
        need = self.requirement(turn)
        if need is None:
            return Route()
        allowed = [
            r
            for r in self.directory.replicas(turn.agent)
            if versions.refusal(policy, need, served(r)) is None
        ]
        if not allowed:
            return Route(waiting=need)
        # Its own version first: nothing to check again, nothing changes under it.
        same = [r for r in allowed if r.fingerprint == need.fingerprint]
        return Route(fingerprint=(same or allowed)[0].fingerprint)

    def claimer(self, agent: str) -> Replica | None:
        """The live replica of `agent` a new turn is claimed for in the commit that
        starts it (decision 590): one that takes such hand-offs and has a free slot,
        in turn; None when none does (the turn is handed to the queue group). A new
        turn has no checkpoint of its own, so any version may take it. The slot is
        for balance only: an execution that gets a turn it cannot run yet waits
        for a slot holding its lease."""
        able = [r for r in self.directory.replicas(agent) if r.claims and not r.full]
        if not able:
            return None
        n = self._next.get(agent, 0)
        self._next[agent] = n + 1
        return able[n % len(able)]

    def waiting(self, turn: TurnRecord) -> Waiting | None:
        """Set for a RUNNING turn nobody owns that no live replica may take."""
        if turn.state != RUNNING or turn.owned:
            return None
        need = self.route(turn).waiting
        if need is None:
            return None
        policy = self.policies.of(turn.agent)
        return Waiting(turn, need, versions.waiting_detail(turn.agent, policy, need))
