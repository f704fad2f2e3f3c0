"""The engine: the one layer the servicers, the reaper and the metrics go through.

It commits through the store (SQLite or PostgreSQL, `store.contract`): each turn
operation is one compare-and-set of the journal in one transaction, and each
checkpoint operation one write of the backend's checkpoint rows. After a turn
commits, the engine wakes the turn's watchers (on other replicas too, through the
store's notification) and tells the outbox there is work; hand-offs of work to a
live replica (after a resume, or a re-drive that has no caller to take it) happen
here too, after the commit, over NATS. No servicer or metric reaches into SQL itself.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from turnkeeper_server.engine_lifecycle import LifecycleOps
from turnkeeper_server.errors import TurnkeeperError, Unavailable
from turnkeeper_server.journal import checkpoints, containment, lifecycle, redrive
from turnkeeper_server.journal import transitions as journal
from turnkeeper_server.journal.lifecycle import Cancelled, Ended
from turnkeeper_server.journal.records import EventRecord, NewEvent, Policy, TurnRecord
from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.journal.status import TurnStatusRow, load_status
from turnkeeper_server.logs import turn_log
from turnkeeper_server.messaging.link import EXECUTE_METHOD, NatsLink, agent_subject
from turnkeeper_server.messaging.outbox import OutboxPublisher
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.store.contract import Conn, Store, Tx
from turnkeeper_server.store.sqlite import Reader
from turnkeeper_server.watch import TurnNotifier

log = logging.getLogger(__name__)

T = TypeVar("T")

WATCH_BATCH = 500


@dataclass(frozen=True)
class Reset:
    seq: int
    attempt: int
    checkpoint_id: str


class Engine(LifecycleOps):
    """Turns and checkpoints, committed through the store (see the module docstring)."""

    def __init__(
        self,
        db: Store,
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
            tx.announce(ids)

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

    def status(self, turn_id: str) -> TurnStatusRow | None:
        """The columns TurnStatus answers with (`journal.status`)."""
        if (cache := self.db.status_cache) is not None:
            return cache.status(self._read().conn, turn_id)
        return load_status(self._read().conn, turn_id)

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

    def thread_agents(self, thread_id: str) -> set[str]:
        return journal.thread_agents(self._read().conn, thread_id)

    # -- checkpoints ----------------------------------------------------------------

    async def checkpoint(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> checkpoints.CheckpointRow | None:
        return await self.db.read(
            lambda conn: self.db.checkpoints.get(conn, thread_id, checkpoint_ns, checkpoint_id)
        )

    async def list_checkpoints(self, **query: Any) -> list[checkpoints.CheckpointRow]:
        """`journal.checkpoints.list_`'s keyword arguments (the same on every backend)."""
        return await self.db.read(lambda conn: list(self.db.checkpoints.list_(conn, **query)))

    async def put_checkpoint(self, **fields: Any) -> None:
        """`journal.checkpoints.put`'s keyword arguments, fence included."""
        await self.db.write(lambda tx: self.db.checkpoints.put(tx, **fields))

    async def put_writes(self, **fields: Any) -> None:
        """`journal.checkpoints.put_writes`'s keyword arguments, fence included."""
        await self.db.write(lambda tx: self.db.checkpoints.put_writes(tx, **fields))

    @property
    def queues_writes(self) -> bool:
        """Writes run one at a time in the order queued (store.contract)."""
        return self.db.queues_writes

    def queue_checkpoint_write(
        self, kind: str, fields: dict[str, Any], *, followed: bool
    ) -> asyncio.Future[None]:
        """`put_checkpoint` (kind "put") or `put_writes` (kind "writes") queued now,
        behind every write before it (only where `queues_writes`); the future is set
        once it is durable."""
        write = self.db.checkpoints.put if kind == "put" else self.db.checkpoints.put_writes
        return self.db.queue_write(lambda tx: write(tx, **fields), followed=followed)

    async def write_checkpoints(
        self, writes: Sequence[tuple[str, dict[str, Any]]]
    ) -> list[TurnkeeperError | None]:
        """`put_checkpoint`s (kind "put") and `put_writes` ("writes"), in order, in
        one transaction; per write, None or why it was refused. A refusal (a stale
        fence, say) rolls the transaction back, and then each write runs in a
        transaction of its own, so only the refused ones are left out."""

        def together(tx: Tx) -> list[TurnkeeperError | None]:
            for kind, fields in writes:
                (self.db.checkpoints.put if kind == "put" else self.db.checkpoints.put_writes)(
                    tx, **fields
                )
            return [None] * len(writes)

        if len(writes) > 1:
            try:
                return await self.db.write(together)
            except Unavailable as exc:
                # The database is away: running each on its own would only wait for
                # the pool again per write. Every write is refused alike, as before.
                return [exc] * len(writes)
            except TurnkeeperError:
                pass
        outcomes: list[TurnkeeperError | None] = []
        for kind, fields in writes:
            try:
                await (self.put_checkpoint if kind == "put" else self.put_writes)(**fields)
                outcomes.append(None)
            except TurnkeeperError as exc:
                outcomes.append(exc)
        return outcomes

    async def delete_thread(self, thread_id: str) -> None:
        await self.db.write(lambda tx: self.db.checkpoints.delete_thread(tx, thread_id))

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

    async def watch(self, turn_id: str, after_seq: int) -> AsyncGenerator[EventRecord | Reset]:
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
                    turn, events = await self.db.read(
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
    conn: Conn, *, turn_id: str, after_seq: int
) -> tuple[TurnRecord, list[EventRecord]]:
    return (
        journal.require_turn(conn, turn_id),
        journal.load_events(conn, turn_id, after_seq, WATCH_BATCH),
    )
