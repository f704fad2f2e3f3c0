"""The agents replicas announced: each replica's startup Redrive names its agent, and
the journal keeps the name, so a turn for an agent no replica ever served (a typo)
can say so where its caller looks, and StartTurn can refuse it when asked to.

A name stays announced: replicas come and go, and a turn waiting for the next one
of a known agent is the ordinary case, not a mistake worth a detail.
"""

from __future__ import annotations

import time

from turnkeeper_server.store.contract import Conn, Tx

_ANNOUNCE = (
    "INSERT INTO main.agents (agent, announced_at) VALUES (?, ?) "
    "ON CONFLICT (agent) DO UPDATE SET announced_at = excluded.announced_at"
)
_ANNOUNCED = "SELECT 1 FROM main.agents WHERE agent = ?"
_ALL = "SELECT agent FROM main.agents ORDER BY agent"


def announce(tx: Tx, agent: str) -> None:
    tx.execute(_ANNOUNCE, (agent, time.time()))


def announced(conn: Conn, agent: str) -> bool:
    return conn.execute(_ANNOUNCED, (agent,)).fetchone() is not None


def all_announced(conn: Conn) -> list[str]:
    """Every agent name announced, in name order (the chat page's agent list)."""
    return [row[0] for row in conn.execute(_ALL).fetchall()]


def unannounced(agent: str) -> str:
    """What a turn of an agent no replica announced says, and StartTurn's refusal."""
    return (
        f"no replica of agent {agent!r} has announced itself to this service: "
        "nothing will take the turn until one starts (is the agent's name right?)"
    )
