"""Hand-offs: what the service tells live agent replicas over NATS after a commit.

A RUNNING turn without an owner (resumed, re-driven by the reaper or an operator,
promoted from its thread's queue) is handed to a live replica of its agent, which
claims it (ClaimTurn) before running it; a turn the service ended while an executor
ran it (cancelled, past a deadline) has that executor told to stop. Neither is a
promise: a hand-off nobody takes waits for the reaper's next claim window or a
replica's startup Redrive, and a stop notice that is lost is caught by the
executor's next fenced write (docs/architecture.md §4-§6).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from turnkeeper._graph_versions import describe

from turnkeeper_server.engine.versions import Route
from turnkeeper_server.logs import turn_log
from turnkeeper_server.messaging.link import (
    ALIVE_METHOD,
    CANCEL_METHOD,
    EXECUTE_METHOD,
    NatsLink,
    agent_subject,
    control_subject,
    replica_subject,
    version_subject,
)
from turnkeeper_server.records import Policy, TurnRecord

# The engine's one logger: its lines say what happened to a turn, and operators
# filter on its name.
log = logging.getLogger("turnkeeper_server.engine")


class Handoffs:
    """Hand-offs to replicas and stop notices, each after its commit."""

    def __init__(
        self,
        link: NatsLink,
        policy: Policy,
        *,
        namespace: str,
        dispatch_timeout: float,
        route: Callable[[TurnRecord], Route] = lambda turn: Route(),
    ) -> None:
        self.link = link
        # Which replicas may take a turn, by graph version (engine/versions.py).
        self.route = route
        self.policy = policy
        self.namespace = namespace
        self.dispatch_timeout = dispatch_timeout
        self._background: set[asyncio.Task[bool]] = set()

    async def dispatch(self, turn: TurnRecord, *, reason: str) -> bool:
        """Hand a RUNNING, unowned turn to a live replica of its agent.

        True when a replica acknowledged it. Otherwise the turn waits: the reaper
        hands it out again when its claim window passes, and a replica of the agent
        that starts up takes it in its startup Redrive.
        """
        if not self.link.connected:
            return False
        route = self.route(turn)
        if route.waiting is not None:
            # The reaper offers a waiting turn again every claim window: those
            # repeats at DEBUG (the turn's detail says it for as long as it waits).
            level = logging.DEBUG if reason == "lease-expired" else logging.INFO
            turn_log(log, turn.turn_id, turn.attempts).log(
                level,
                "hand-off (%s) not sent: no live replica may take it; it waits for graph "
                "version %s",
                reason,
                describe(route.waiting.fingerprint, route.waiting.label),
            )
            return False
        prefix = self.policy.subject_prefix
        subject = (
            agent_subject(prefix, self.namespace, turn.agent)
            if route.fingerprint is None
            else version_subject(prefix, self.namespace, turn.agent, route.fingerprint)
        )
        result = await self.link.request(
            subject,
            EXECUTE_METHOD,
            {"turn_id": turn.turn_id, "attempt": turn.attempts, "reason": reason},
            self.dispatch_timeout,
        )
        accepted = isinstance(result, dict) and bool(result.get("accepted"))
        turn_log(log, turn.turn_id, turn.attempts).info(
            "hand-off (%s) %s",
            reason,
            "accepted" if accepted else "not taken; waiting for a replica",
        )
        return accepted

    async def dispatch_claimed(self, turn: TurnRecord, claim: str, *, reason: str) -> bool:
        """Hand a turn the start's commit claimed for its owner to that owner alone
        (decision 590), with `claim`, what ClaimTurn would have answered (the
        bridge runs it without asking). True when the owner acknowledged it."""
        if not self.link.connected or not turn.owner_incarnation:
            return False
        result = await self.link.request(
            replica_subject(
                self.policy.subject_prefix, self.namespace, turn.agent, turn.owner_incarnation
            ),
            EXECUTE_METHOD,
            {
                "turn_id": turn.turn_id,
                "attempt": turn.attempts,
                "reason": reason,
                "incarnation": turn.owner_incarnation,
                "claim": claim,
                # The lease its first heartbeat gives (the start gave a claim window).
                "lease_seconds": self.policy.lease_seconds,
            },
            self.dispatch_timeout,
        )
        accepted = isinstance(result, dict) and bool(result.get("accepted"))
        turn_log(log, turn.turn_id, turn.attempts).info(
            "hand-off (%s) with its claim to %s/%s %s",
            reason,
            turn.owner_replica,
            turn.owner_incarnation,
            "accepted" if accepted else "not taken; offered again",
        )
        return accepted

    async def alive(self, agent: str, incarnation: str, turns: dict[str, int]) -> set[str]:
        """Of `turns` ({turn_id: attempt}) whose leases lapsed, those the replica of
        `incarnation` answers that it still runs: its heartbeats came late (a busy
        machine), it is not dead. No answer within the dispatch timeout (a dead,
        frozen or unreachable replica): none."""
        if not self.link.connected:
            return set()
        result = await self.link.request(
            control_subject(self.policy.subject_prefix, self.namespace, agent),
            ALIVE_METHOD,
            {"incarnation": incarnation, "turns": turns},
            self.dispatch_timeout,
        )
        running = result.get("running") if isinstance(result, dict) else None
        if not isinstance(running, list):
            return set()
        return {t for t in running if isinstance(t, str) and t in turns}

    def dispatch_later(self, turn: TurnRecord, *, reason: str) -> None:
        """`dispatch` in the background: the caller does not wait for a replica."""
        self._run(self.dispatch(turn, reason=reason))

    def stop_later(self, turn: TurnRecord) -> None:
        """Tell the executor of a turn the service ended to stop, in the background."""
        self._run(
            self.link.notify(
                control_subject(self.policy.subject_prefix, self.namespace, turn.agent),
                CANCEL_METHOD,
                {"turn_id": turn.turn_id, "attempt": turn.attempts, "reason": turn.end_reason},
            )
        )

    def run_later(self, coro: Coroutine[Any, Any, bool]) -> None:
        """`coro` in the background, cancelled at shutdown with the hand-offs."""
        self._run(coro)

    def _run(self, coro: Coroutine[Any, Any, bool]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def stop(self) -> None:
        """Cancel the hand-offs and notices still under way (at shutdown)."""
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
