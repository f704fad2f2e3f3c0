"""Graph versions of turns: which replica may continue a turn (docs/versions.md).

Each turn records the graph version (fingerprint and label) of the code that started
it or last took it over, and each root checkpoint its bridge wrote carries a stamp of
that code (turnkeeper._graph_versions). When a replica takes a turn (ClaimTurn after
a hand-off, its startup Redrive), the agent's version policy decides:

- ``pin``: only a replica serving the turn's own version;
- ``compatible``: that one, or one whose graph passes the compatibility check against
  the turn's newest checkpoint (every node it would run next exists, every channel it
  holds exists with the same reducer kind); a turn with no checkpoint starts from its
  input and may go to any version;
- ``latest``: any replica (what turnkeeper did before versions).

A turn no versioned replica ever ran has no version and goes to anyone. A replica
that announces no version (a bridge from before versions) may take only such turns,
unless the policy is ``latest``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from turnkeeper._graph_versions import Stamp, describe, incompatibilities, stamp_of_metadata

from turnkeeper_server.errors import InvalidArgument, WrongState
from turnkeeper_server.journal.transitions import latest_boundary, update_turn
from turnkeeper_server.limits import MAX_SHAPE_BYTES
from turnkeeper_server.records import TurnRecord
from turnkeeper_server.store.contract import CheckpointRows, Conn, Tx

PIN: Final = "pin"
COMPATIBLE: Final = "compatible"
LATEST: Final = "latest"
POLICIES: Final = (PIN, COMPATIBLE, LATEST)
# The default a production team wants (decision 237): never continue a turn
# on code that cannot, and never hold one back that can.
DEFAULT_POLICY: Final = COMPATIBLE


@dataclass(frozen=True)
class VersionPolicies:
    """The operator's version policy per agent, and the default for the others."""

    default: str = DEFAULT_POLICY
    agents: Mapping[str, str] = field(default_factory=dict)

    def of(self, agent: str) -> str:
        return self.agents.get(agent, self.default)

    @classmethod
    def parse(cls, default: str, entries: list[str]) -> VersionPolicies:
        """``--version-policy`` values: ``AGENT=POLICY`` each; ValueError saying why not."""
        if default not in POLICIES:
            raise ValueError(f"version policy {default!r}: one of {', '.join(POLICIES)}")
        agents: dict[str, str] = {}
        for entry in entries:
            agent, sep, policy = entry.partition("=")
            if not sep or not agent or policy not in POLICIES:
                raise ValueError(
                    f"--version-policy {entry!r}: expected AGENT=POLICY, POLICY one of "
                    f"{', '.join(POLICIES)}"
                )
            agents[agent] = policy
        return cls(default, agents)


@dataclass(frozen=True)
class Served:
    """The graph version a replica serves, as it sent it (empty: it sent none)."""

    fingerprint: str = ""
    label: str = ""
    shape: Mapping[str, Any] | None = None

    @classmethod
    def parse(cls, fingerprint: str, label: str, shape_json: str) -> Served:
        if not fingerprint:
            return cls()
        shape: Any = None
        if shape_json:
            if len(shape_json) > MAX_SHAPE_BYTES:
                raise InvalidArgument(
                    f"graph.shape_json is {len(shape_json)} bytes; at most {MAX_SHAPE_BYTES}"
                )
            try:
                shape = json.loads(shape_json)
            except ValueError as exc:
                raise InvalidArgument(f"graph.shape_json is not JSON: {exc}") from None
            if not isinstance(shape, dict):
                raise InvalidArgument("graph.shape_json must be a JSON object")
        return cls(fingerprint, label, shape)


@dataclass(frozen=True)
class Requirement:
    """The version a turn was last run by, and its newest checkpoint's stamp."""

    fingerprint: str
    label: str
    stamp: Stamp | None


def requirement(conn: Conn, rows: CheckpointRows, turn: TurnRecord) -> Requirement | None:
    """What a replica taking `turn` is checked against; None: anyone may."""
    stamp = newest_stamp(conn, rows, turn)
    if turn.graph_fingerprint:
        return Requirement(turn.graph_fingerprint, turn.graph_label, stamp)
    if stamp is not None:
        return Requirement(stamp.fingerprint, stamp.label, stamp)
    return None


def newest_stamp(conn: Conn, rows: CheckpointRows, turn: TurnRecord) -> Stamp | None:
    """The stamp of the turn's newest root checkpoint; None without one."""
    checkpoint_id, _ = latest_boundary(conn, turn.turn_id)
    if not checkpoint_id:
        return None
    row = rows.get(conn, turn.thread_id, "", checkpoint_id)
    return None if row is None or row.metadata is None else stamp_of_metadata(row.metadata)


def refusal(policy: str, need: Requirement | None, served: Served) -> str | None:
    """Why a replica serving `served` may not take a turn needing `need` under
    `policy`, in words an operator can act on; None when it may."""
    if need is None or policy == LATEST or served.fingerprint == need.fingerprint:
        return None
    wanted = describe(need.fingerprint, need.label)
    offered = describe(served.fingerprint, served.label) if served.fingerprint else "no version"
    if policy == PIN:
        return (
            f"version policy pin: the turn continues only on graph version {wanted}, and "
            f"this replica serves {offered}"
        )
    if need.stamp is None:
        return None  # nothing checkpointed: the turn starts from its input anywhere
    if served.shape is None:
        return (
            f"version policy compatible: the turn's checkpoint was written by graph "
            f"version {wanted}, and this replica serves {offered} without a shape to check"
        )
    reasons = incompatibilities(need.stamp, served.shape)
    if not reasons:
        return None
    return (
        f"version policy compatible: the turn's checkpoint, written by graph version "
        f"{wanted}, cannot continue on {offered}: {'; '.join(reasons)}"
    )


def check_claim(tx: Tx, turn: TurnRecord, policy: str, served: Served) -> None:
    """ClaimTurn's check: WrongState (FAILED_PRECONDITION) saying why not."""
    reason = refusal(policy, requirement(tx.conn, tx.checkpoints, turn), served)
    if reason is not None:
        raise WrongState(
            f"turn {turn.turn_id!r} is not for this replica: {reason}; the service hands "
            "it to a replica that may take it, or it waits for one"
        )


def waiting_detail(agent: str, policy: str, need: Requirement) -> str:
    """Turn.detail of a turn no live replica may take."""
    wanted = describe(need.fingerprint, need.label)
    return (
        f"waits for a replica of agent {agent!r} serving graph version {wanted} (version "
        f"policy {policy}): start one, or move the turn to a version that is running "
        "with `turnkeeper agents migrate` after checking it with `turnkeeper replay-check`"
    )


def record_runner(tx: Tx, turn_id: str, served: Served) -> None:
    """The turn is now run by code of this version (a claim, a startup Redrive)."""
    if served.fingerprint:
        update_turn(
            tx,
            turn_id,
            time.time(),
            graph_fingerprint=served.fingerprint,
            graph_label=served.label,
        )
