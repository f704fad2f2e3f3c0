"""The turn journal as the servicers use it: async operations over `journal`.

Each operation is one compare-and-set in the writer thread; after it commits, the
watchers of the turn are woken and the outbox publisher is told there is work.
Hand-offs to a live replica (after a resume or a re-drive that has no caller to
take it) happen here too, after the commit, over NATS.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from turnkeeper_server.journal import containment, erasure, lifecycle, redrive
from turnkeeper_server.journal.erasure import Erased
from turnkeeper_server.journal import transitions as journal
from turnkeeper_server.store.sqlite import Database, Reader, Tx
from turnkeeper_server.journal.transitions import EventRecord, NewEvent, Policy, TurnRecord
from turnkeeper_server.logs import turn_log
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.journal.lifecycle import Cancelled, Ended
from turnkeeper_server.messaging.link import (
    CANCEL_METHOD,
    EXECUTE_METHOD,
    NatsLink,
    agent_subject,
    control_subject,
)
from turnkeeper_server.messaging.outbox import OutboxPublisher
from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.watch import TurnNotifier

log = logging.getLogger(__name__)

T = TypeVar("T")

WATCH_BATCH = 500


@dataclass(frozen=True)
class Reset:
    seq: int
    attempt: int
    checkpoint_id: str


class Turns:
    def __init__(
        self,
        db: Database,
        policy: Policy,
        notifier: TurnNotifier,
        outbox: OutboxPublisher,
        link: NatsLink,
        metrics: Metrics,
        *,
        namespace: str = "default",
        dispatch_timeout: float = 2.0,
    ) -> None:
        self.db = db
        self.policy = policy
        self.notifier = notifier
        self.outbox = outbox
        self.link = link
        self.metrics = metrics
        self.namespace = namespace
        self.dispatch_timeout = dispatch_timeout
        self._dispatches: set[asyncio.Task[bool]] = set()

    # -- plumbing ---------------------------------------------------------------

    async def _write(self, turn_ids: Callable[[T], Sequence[str]], fn: Callable[[Tx], T]) -> T:
        def op(tx: Tx) -> T:
            result = fn(tx)
            ids = list(turn_ids(result))

            def woken() -> None:
                for turn_id in ids:
                    self.notifier.notify(turn_id)
                self.outbox.wake()

            tx.after_commit(woken)
            return result

        return await self.db.write(op)

    def _read(self) -> Reader:
        return Reader(self.db)

    # -- reads --------------------------------------------------------------------

    def get(self, turn_id: str) -> TurnRecord | None:
        return journal.load_turn(self._read().conn, turn_id)

    def require(self, turn_id: str) -> TurnRecord:
        return journal.require_turn(self._read().conn, turn_id)

    def events(self, turn_id: str, after_seq: int, limit: int) -> list[EventRecord]:
        return journal.load_events(self._read().conn, turn_id, after_seq, limit)

    def list_turns(
        self, *, state: str | None, agent: str, thread_id: str, before: int | None, limit: int
    ) -> list[tuple[int, TurnRecord]]:
        return journal.list_turns(
            self._read().conn,
            state=state,
            agent=agent,
            thread_id=thread_id,
            before_rowid=before,
            limit=limit,
        )

    # -- transitions ----------------------------------------------------------------

    async def start(
        self,
        *,
        turn_id: str,
        thread_id: str,
        agent: str,
        input_json: str,
        replica: str,
        incarnation: str,
        strategy: str = lifecycle.REJECT,
        max_run_seconds: float = 0.0,
        park_expiry_seconds: float = 0.0,
    ) -> tuple[TurnRecord, bool, Cancelled | None]:
        turn, created, cancelled = await self._write(
            lambda r: [r[0].turn_id] + ([r[2].turn.turn_id] if r[2] else []),
            lambda tx: lifecycle.start_turn(
                tx,
                turn_id=turn_id,
                thread_id=thread_id,
                agent=agent,
                input_json=input_json,
                replica=replica,
                incarnation=incarnation,
                strategy=strategy,
                max_run_seconds=max_run_seconds,
                park_expiry_seconds=park_expiry_seconds,
                policy=self.policy,
            ),
        )
        if cancelled is not None:
            self._cancelled(cancelled, f"{strategy} by turn {turn_id}")
            self._after_end(Ended(stop_owner=cancelled.owner), cancelled.turn)
        if created:
            self.metrics.turns_started.inc()
            turn_log(log, turn.turn_id, turn.attempts).info(
                "%s on thread %s (agent %s, owner %s)",
                "queued" if turn.state == journal.QUEUED else "started",
                turn.thread_id,
                turn.agent,
                f"{replica}/{incarnation}"
                if replica and turn.state == journal.RUNNING
                else "none: waits for a claim",
            )
        return turn, created, cancelled

    async def heartbeat(
        self, *, turn_id: str, attempt: int, replica: str, incarnation: str
    ) -> float:
        return await self.db.write(
            lambda tx: journal.heartbeat(
                tx,
                turn_id=turn_id,
                attempt=attempt,
                replica=replica,
                incarnation=incarnation,
                policy=self.policy,
            )
        )

    async def append(self, *, turn_id: str, attempt: int, events: Sequence[NewEvent]) -> int:
        last = await self._write(
            lambda _: [turn_id],
            lambda tx: journal.append_events(
                tx, turn_id=turn_id, attempt=attempt, events=events, policy=self.policy
            ),
        )
        self.metrics.events_appended.inc(len(events))
        return last

    async def park(
        self, *, turn_id: str, attempt: int, interrupt_json: str, events: Sequence[NewEvent]
    ) -> TurnRecord:
        turn = await self._write(
            lambda _: [turn_id],
            lambda tx: lifecycle.on_parked(
                tx,
                journal.park_turn(
                    tx,
                    turn_id=turn_id,
                    attempt=attempt,
                    interrupt_json=interrupt_json,
                    events=events,
                    policy=self.policy,
                ),
            ),
        )
        self.metrics.events_appended.inc(len(events))
        turn_log(log, turn_id, attempt).info("parked at seq %d", turn.last_seq)
        return turn

    async def finish(
        self, *, turn_id: str, attempt: int, failed: bool, error: str, events: Sequence[NewEvent]
    ) -> TurnRecord:
        def finish(tx: Tx) -> tuple[TurnRecord, Ended]:
            turn = journal.finish_turn(
                tx,
                turn_id=turn_id,
                attempt=attempt,
                failed=failed,
                error=error,
                events=events,
                policy=self.policy,
            )
            return turn, lifecycle.after_end(tx, turn, self.policy)

        turn, ended = await self._write(lambda _: [turn_id], finish)
        self._after_end(ended, turn)
        self.metrics.events_appended.inc(len(events))
        self.metrics.turns_finished.labels(state=turn.state).inc()
        turn_log(log, turn_id, attempt).info(
            "finished %s at seq %d%s", turn.state, turn.last_seq, f": {error}" if error else ""
        )
        return turn

    async def resume(self, *, turn_id: str, resume_json: str) -> tuple[TurnRecord, bool]:
        turn = await self._write(
            lambda _: [turn_id],
            lambda tx: lifecycle.on_resumed(
                tx,
                journal.resume_detached(
                    tx, turn_id=turn_id, resume_json=resume_json, policy=self.policy
                ),
            ),
        )
        self.metrics.resumes.inc()
        turn_log(log, turn_id, turn.attempts).info("resumed: RUNNING, waiting for a replica")
        return turn, await self.dispatch(turn, reason="resume")

    async def claim(
        self, *, turn_id: str, attempt: int, replica: str, incarnation: str
    ) -> tuple[TurnRecord, str]:
        claimed = await self._write(
            lambda r: [r[0].turn_id],
            lambda tx: journal.claim_turn(
                tx,
                turn_id=turn_id,
                attempt=attempt,
                replica=replica,
                incarnation=incarnation,
                policy=self.policy,
            ),
        )
        turn_log(log, turn_id, attempt).info(
            "claimed by %s/%s (checkpoint %s)", replica, incarnation, claimed[1] or "none"
        )
        return claimed

    async def redrive_replica(
        self, *, agent: str, replica: str, incarnation: str
    ) -> list[Redriven]:
        redriven = await self._write(
            lambda rs: [r.turn.turn_id for r in rs],
            lambda tx: self._capped(
                tx,
                containment.redrive_replica(
                    tx, agent=agent, replica=replica, incarnation=incarnation, policy=self.policy
                ),
            ),
        )
        self._count(redriven, "startup")
        return redriven

    async def redrive_turn(self, *, turn_id: str, force: bool) -> tuple[Redriven, bool]:
        redriven = await self._write(
            lambda r: [r.turn.turn_id],
            lambda tx: self._capped(
                tx, [redrive.redrive_operator(tx, turn_id=turn_id, force=force, policy=self.policy)]
            )[0],
        )
        self._count([redriven], "operator")
        if redriven.failed_at_cap:
            return redriven, False
        return redriven, await self.dispatch(redriven.turn, reason="redrive")

    async def reap(self) -> list[Redriven]:
        """Re-drive turns whose lease expired and hand each to a live replica."""
        expired = await self._write(
            lambda rs: [t.turn_id for t, _ in rs],
            lambda tx: lifecycle.expire_deadlines(tx, policy=self.policy),
        )
        for turn, ended in expired:
            self.metrics.turns_finished.labels(state=turn.state).inc()
            turn_log(log, turn.turn_id, turn.attempts).warning(
                "%s: FAILED (%s)", turn.end_reason, turn.error
            )
            self._after_end(ended, turn)
        redriven = await self._write(
            lambda rs: [r.turn.turn_id for r in rs],
            lambda tx: self._capped(tx, containment.reap_expired(tx, policy=self.policy)),
        )
        self._count(redriven, "lease")
        for r in redriven:
            if not r.failed_at_cap:
                task = asyncio.create_task(self.dispatch(r.turn, reason="lease-expired"))
                self._dispatches.add(task)
                task.add_done_callback(self._dispatches.discard)
        return redriven

    def _capped(self, tx: Tx, redriven: list[Redriven]) -> list[Redriven]:
        """A turn failed at the re-drive cap ended: its thread's queue moves on."""
        for r in redriven:
            if r.failed_at_cap:
                ended = lifecycle.after_end(tx, r.turn, self.policy)
                if ended.promoted is not None:
                    tx.after_commit(
                        functools.partial(self._after_end, Ended(promoted=ended.promoted), r.turn)
                    )
        return redriven

    # -- cancel and the queue ---------------------------------------------------------

    async def cancel(self, *, turn_id: str, rollback: bool, detail: str) -> Cancelled:
        cancelled, ended = await self._write(
            lambda r: [turn_id] + ([r[1].promoted.turn_id] if r[1].promoted else []),
            lambda tx: lifecycle.cancel_turn(
                tx, turn_id=turn_id, rollback=rollback, detail=detail, policy=self.policy
            ),
        )
        self._cancelled(cancelled, detail or "CancelTurn")
        self._after_end(ended, cancelled.turn)
        return cancelled

    async def erase_thread(self, *, thread_id: str, cancel: bool) -> Erased:
        erased = await self._write(
            lambda e: [e.cancelled.turn.turn_id] if e.cancelled else [],
            lambda tx: erasure.erase_thread(
                tx, thread_id=thread_id, cancel=cancel, policy=self.policy
            ),
        )
        if erased.cancelled is not None:
            self._cancelled(erased.cancelled, "thread deleted")
            self._after_end(Ended(stop_owner=erased.cancelled.owner), erased.cancelled.turn)
        log.info("thread %s erased: %d turns", thread_id, erased.turns_deleted)
        return erased

    def _cancelled(self, cancelled: Cancelled, why: str) -> None:
        self.metrics.turns_finished.labels(state=cancelled.turn.state).inc()
        turn_log(log, cancelled.turn.turn_id, cancelled.turn.attempts).info(
            "cancelled (%s)%s",
            why,
            f"; rollback removed {cancelled.checkpoints_removed} checkpoints"
            if cancelled.checkpoints_removed
            else "",
        )

    def _after_end(self, ended: Ended, turn: TurnRecord) -> None:
        """After the commit that ended `turn`: tell its executor to stop, and hand
        the thread's next (promoted) turn to a replica. Both in the background."""
        if ended.stop_owner is not None:
            self._background(self._tell_stop(turn))
        if ended.promoted is not None:
            self.notifier.notify(ended.promoted.turn_id)
            turn_log(log, ended.promoted.turn_id, 0).info(
                "dequeued on thread %s: RUNNING, waiting for a replica", turn.thread_id
            )
            self._background(self.dispatch(ended.promoted, reason="dequeued"))

    async def _tell_stop(self, turn: TurnRecord) -> bool:
        return await self.link.notify(
            control_subject(self.policy.subject_prefix, self.namespace, turn.agent),
            CANCEL_METHOD,
            {"turn_id": turn.turn_id, "attempt": turn.attempts, "reason": turn.end_reason},
        )

    def _background(self, coro: Coroutine[Any, Any, bool]) -> None:
        task = asyncio.create_task(coro)
        self._dispatches.add(task)
        task.add_done_callback(self._dispatches.discard)

    def _count(self, redriven: Sequence[Redriven], trigger: str) -> None:
        for r in redriven:
            tlog = turn_log(log, r.turn.turn_id, r.turn.attempts)
            if r.failed_at_cap:
                self.metrics.failed_at_cap.inc()
                tlog.warning(
                    "orphaned (%s) at the re-drive cap of %d: FAILED",
                    trigger,
                    self.policy.max_redrives,
                )
            elif r.rewound:
                self.metrics.redrives.labels(trigger=trigger).inc()
                self.metrics.rewinds.inc()
                tlog.info(
                    "re-driven (%s): rewound to seq %d, checkpoint %s",
                    trigger,
                    r.rewind_seq,
                    r.checkpoint_id or "none (restarts from the journaled input)",
                )

    async def dispatch(self, turn: TurnRecord, *, reason: str) -> bool:
        """Hand a RUNNING, unowned turn to a live replica of its agent.

        True when a replica acknowledged it. Otherwise the turn waits: the reaper
        hands it out again when its claim window passes, and a replica of the agent
        that starts up takes it in its startup Redrive.
        """
        if not self.link.connected:
            return False
        result = await self.link.request(
            agent_subject(self.policy.subject_prefix, self.namespace, turn.agent),
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

    async def stop(self) -> None:
        for task in list(self._dispatches):
            task.cancel()
        await asyncio.gather(*self._dispatches, return_exceptions=True)

    # -- watching --------------------------------------------------------------------

    async def watch(self, turn_id: str, after_seq: int) -> AsyncIterator[EventRecord | Reset]:
        """Retained events after `after_seq`, then live ones; a Reset and a replay from
        seq 1 whenever the turn is rewound; ends after the terminal event, or at once
        when the turn is over and `after_seq` is already past it."""
        turn = self.require(turn_id)
        epoch = turn.rewinds
        cursor = after_seq
        self.metrics.watchers.inc()
        try:
            while True:
                waiter = self.notifier.register(turn_id)
                try:
                    turn, events = self._read().snapshot(
                        functools.partial(_turn_and_events, turn_id=turn_id, after_seq=cursor)
                    )
                    if turn.rewinds != epoch:
                        epoch = turn.rewinds
                        cursor = 0
                        checkpoint_id, boundary = journal.latest_boundary(
                            self._read().conn, turn_id
                        )
                        yield Reset(
                            seq=boundary, attempt=turn.attempts, checkpoint_id=checkpoint_id
                        )
                        continue
                    for event in events:
                        yield event
                        cursor = event.seq
                        if event.type in journal.TERMINAL_EVENTS:
                            return
                    if len(events) == WATCH_BATCH:
                        continue
                    if turn.state in journal.ENDED:
                        # Over, and its terminal event is at or before the cursor:
                        # nothing more will ever come (a watcher joined too late).
                        return
                    await waiter.wait()
                finally:
                    self.notifier.unregister(turn_id, waiter)
        finally:
            self.metrics.watchers.dec()


def _turn_and_events(
    conn: sqlite3.Connection, *, turn_id: str, after_seq: int
) -> tuple[TurnRecord, list[EventRecord]]:
    return (
        journal.require_turn(conn, turn_id),
        journal.load_events(conn, turn_id, after_seq, WATCH_BATCH),
    )
