"""Which replica a new turn's start claims it for (decision 590): only one that
announced it takes hand-offs with their claim and has a free slot, in turn; an older
replica (or the TypeScript runner) announces no such thing and keeps the queue
group's hand-off, with its ClaimTurn."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, cast

from turnkeeper_server.engine.versions import Versions
from turnkeeper_server.journal.versions import VersionPolicies
from turnkeeper_server.messaging.directory import AgentDirectory, Replica, _replica


class Directory:
    def __init__(self, *replicas: Replica) -> None:
        self.live = list(replicas)

    def replicas(self, agent: str) -> list[Replica]:
        return self.live


def heard(**announced: Any) -> Replica:
    replica = _replica(json.dumps(announced).encode(), 0.0)
    assert replica is not None
    return replica


def versions(directory: Directory) -> Versions:
    return Versions(cast(Any, None), cast(AgentDirectory, directory), VersionPolicies())


def test_only_replicas_that_announce_it_get_a_claimed_turn_in_turn() -> None:
    old = heard(replica="old", incarnation="i-old")  # says nothing of claims
    a = heard(replica="a", incarnation="i-a", claims=True)
    b = heard(replica="b", incarnation="i-b", claims=True)
    assert not old.claims and a.claims
    chosen = versions(Directory(old, a, b))
    assert [chosen.claimer("agent") for _ in range(4)] == [a, b, a, b]


def test_a_full_replica_or_none_that_takes_claims_leaves_the_queue_group_s_path() -> None:
    old = heard(replica="old", incarnation="i-old")
    full = heard(replica="a", incarnation="i-a", claims=True, full=True)
    assert versions(Directory(old, full)).claimer("agent") is None
    assert versions(Directory(old)).claimer("agent") is None
    free = dataclasses.replace(full, full=False)
    assert versions(Directory(old, free)).claimer("agent") == free
