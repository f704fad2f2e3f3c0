"""The engine's turns: every transition of a turn, committed through the store, and
what follows each commit.

Each operation is one compare-and-set of the journal (journal/) in one transaction
of the store. After it commits, the turn's watchers are woken (on other replicas
too, through the store's notification), the outbox is told there is work, and
hand-offs or stop notices go to replicas (engine/handoffs.py). Reads for the RPCs
are here too; no servicer or metric reaches into SQL itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import TypeVar

from turnkeeper._graph_versions import describe, short

from turnkeeper_server.engine.assistants import ensure_default
from turnkeeper_server.engine.handoffs import Handoffs
from turnkeeper_server.engine.versions import Versions, Waiting
from turnkeeper_server.engine.watch import (
    OWNED,
    News,
    Reset,
    Rewound,
    TurnNotifier,
    follow,
    follow_live,
    follow_settled,
)
from turnkeeper_server.errors import WrongState
from turnkeeper_server.journal import (
    agents,
    containment,
    erasure,
    lifecycle,
    redrive,
    start,
    transitions,
    versions,
)
from turnkeeper_server.journal.erasure import Erased
from turnkeeper_server.journal.lifecycle import Cancelled, Ended
from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.journal.start import Started, StartRequest
from turnkeeper_server.journal.transitions import Closed
from turnkeeper_server.journal.versions import Requirement, Served
from turnkeeper_server.logs import turn_log
from turnkeeper_server.messaging.outbox import OutboxPublisher
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.records import (
    PARKED,
    QUEUED,
    RUNNING,
    EventRecord,
    NewEvent,
    Policy,
    TurnRecord,
)
from turnkeeper_server.store.contract import Store, Tx
from turnkeeper_server.store.records import TurnStatusRow

# The engine's one logger (engine/handoffs.py).
log = logging.getLogger("turnkeeper_server.engine")

T = TypeVar("T")


class Turns:
    """Turn operations (see the module docstring)."""

    def __init__(
        self,
        db: Store,
        policy: Policy,
        notifier: TurnNotifier,
        outbox: OutboxPublisher,
        metrics: Metrics,
        handoffs: Handoffs,
        versions: Versions,
    ) -> None:
        self.db = db
        self.policy = policy
        self.notifier = notifier
        self.outbox = outbox
        self.metrics = metrics
        self.handoffs = handoffs
        self.versions = versions
        # Agents known to be announced: a name stays announced (journal/agents.py), so
        # only a name not yet seen costs a read.
        self._announced: set[str] = set()

    # -- plumbing ---------------------------------------------------------------

    async def _write(
        self,
        turn_ids: Callable[[T], Sequence[str]],
        fn: Callable[[Tx], T],
        news: News | Callable[[T], News] = None,
    ) -> T:
        """`fn` in a transaction; after its commit the turns it names wake their
        followers, told `news` or what it makes of the result (None: they read the
        journal)."""

        def op(tx: Tx) -> T:
            result = fn(tx)
            ids = list(turn_ids(result))
            tx.announce(ids)
            told = news(result) if callable(news) else news

            def woken() -> None:
                for turn_id in ids:
                    self.notifier.notify(turn_id, told)
                self.outbox.wake()

            tx.after_commit(woken)
            return result

        return await self.db.write(op)

    # -- reads --------------------------------------------------------------------

    def get(self, turn_id: str) -> TurnRecord | None:
        return transitions.load_turn(self.db.read_conn(), turn_id)

    def status(self, turn_id: str) -> TurnStatusRow | None:
        """The columns TurnStatus answers with (store/status_cache.py)."""
        return self.db.turn_status(turn_id)

    def require(self, turn_id: str) -> TurnRecord:
        return transitions.require_turn(self.db.read_conn(), turn_id)

    def events(self, turn_id: str, after_seq: int, limit: int) -> list[EventRecord]:
        return transitions.load_events(self.db.read_conn(), turn_id, after_seq, limit)

    def list_turns(
        self, *, state: str | None, agent: str, thread_id: str, before: int | None, limit: int
    ) -> list[tuple[int, TurnRecord]]:
        return transitions.list_turns(
            self.db.read_conn(),
            state=state,
            agent=agent,
            thread_id=thread_id,
            before_rowid=before,
            limit=limit,
        )

    def announced(self, agent: str) -> bool:
        """Whether a replica of the agent ever announced itself (its startup Redrive)."""
        if agent in self._announced:
            return True
        if agents.announced(self.db.read_conn(), agent):
            self._announced.add(agent)
            return True
        return False

    def announced_agents(self) -> list[str]:
        """Every agent a replica ever announced, in name order."""
        return agents.all_announced(self.db.read_conn())

    def detail(self, turn: TurnRecord) -> str:
        """Why nobody runs the turn, when the service knows (Turn.detail)."""
        return self.explain(turn)[0]

    def explain(self, turn: TurnRecord) -> tuple[str, Requirement | None]:
        """Turn.detail and Turn.waiting_for: why nobody runs a RUNNING turn nobody
        owns (its agent never announced; no live replica's graph version may take it,
        docs/versions.md), and the version it waits for."""
        if turn.state != RUNNING or turn.owner_replica:
            return "", None
        if not self.announced(turn.agent):
            return agents.unannounced(turn.agent), None
        waiting = self.versions.waiting(turn)
        if waiting is not None:
            return waiting.detail, waiting.need
        full = self.versions.directory.full(turn.agent)
        if full:
            limits = sorted({r.max_turns for r in full})
            return (
                f"waits for a free slot: every live replica of agent {turn.agent} "
                f"({len(full)}) runs as many turns as it may at once (--max-turns "
                f"{'/'.join(map(str, limits))}); it starts when one frees, nothing is lost",
                None,
            )
        return "", None

    def status_explain(self, turn_id: str, status: TurnStatusRow) -> tuple[str, Requirement | None]:
        """TurnStatus's detail and waiting_for, as `explain`'s: an owned or ended turn
        costs no read."""
        if status.state != RUNNING or status.owner_replica:
            return "", None
        turn = self.get(turn_id)
        return ("", None) if turn is None else self.explain(turn)

    def thread_agents(self, thread_id: str) -> set[str]:
        return transitions.thread_agents(self.db.read_conn(), thread_id)

    def watch(
        self, turn_id: str, after_seq: int, *, after_attempt: int | None = None
    ) -> AsyncGenerator[EventRecord | Reset]:
        """WatchTurn's stream (engine/watch.py); `after_attempt`: the attempt of the
        event at `after_seq` its client has, when it says (the SSE's resume)."""
        return follow(
            self.db, self.notifier, self.metrics, turn_id, after_seq, after_attempt=after_attempt
        )

    def watch_settled(self, turn_id: str, after_seq: int) -> AsyncGenerator[EventRecord]:
        """The events no rewind can take back (engine/watch.py, the LangGraph API)."""
        return follow_settled(self.db, self.notifier, self.metrics, turn_id, after_seq)

    def watch_live(
        self,
        turn_id: str,
        after_seq: int,
        *,
        after_attempt: int | None,
        waits: Callable[[str], bool],
    ) -> AsyncGenerator[EventRecord | Rewound]:
        """The events as they come but those `waits` holds back until settled, with a
        `Rewound` when a re-drive takes released ones back (engine/watch.py, the
        LangGraph API)."""
        return follow_live(
            self.db,
            self.notifier,
            self.metrics,
            turn_id,
            after_seq,
            after_attempt=after_attempt,
            waits=waits,
        )

    # -- transitions ----------------------------------------------------------------

    async def start(self, request: StartRequest) -> Started:
        started = await self._write(
            lambda r: [r.turn.turn_id] + ([r.cancelled.turn.turn_id] if r.cancelled else []),
            lambda tx: start.start_turn(tx, request, self.policy),
        )
        turn, cancelled = started.turn, started.cancelled
        if cancelled is not None:
            self._cancelled(cancelled, f"{request.strategy} by turn {turn.turn_id}")
            self._after_end(Ended(stop_owner=cancelled.owner), cancelled.turn)
        if started.created:
            self.metrics.turns_started.inc()
            turn_log(log, turn.turn_id, turn.attempts).info(
                "%s on thread %s (agent %s, owner %s)",
                "queued" if turn.state == QUEUED else "started",
                turn.thread_id,
                turn.agent,
                f"{request.replica}/{request.incarnation}"
                if request.replica and turn.state == RUNNING
                else "none: waits for a claim",
            )
        return started

    def hand_with_claim_later(self, turn: TurnRecord, claim: str, *, reason: str) -> None:
        """After a start that claimed `turn` for a replica (StartRequest.handed):
        hand it to that replica with `claim` in the background; not taken (the
        replica gone, the message lost), it is offered again at once as an
        unclaimed turn (decision 590)."""
        self.handoffs.run_later(self._hand_with_claim(turn, claim, reason))

    async def _hand_with_claim(self, turn: TurnRecord, claim: str, reason: str) -> bool:
        if await self.handoffs.dispatch_claimed(turn, claim, reason=reason):
            return True
        reoffered = await self._write(
            lambda r: [r.turn.turn_id] if r is not None else [],
            lambda tx: containment.reoffer(tx, turn, self.policy),
        )
        if reoffered is not None:
            await self.handoffs.dispatch(reoffered.turn, reason=f"{reason}, offered again")
        return False

    async def heartbeat(
        self, *, turn_id: str, attempt: int, replica: str, incarnation: str
    ) -> float:
        return await self.db.write(
            lambda tx: transitions.heartbeat(
                tx,
                turn_id=turn_id,
                attempt=attempt,
                replica=replica,
                incarnation=incarnation,
                policy=self.policy,
            )
        )

    async def append(self, *, turn_id: str, attempt: int, events: Sequence[NewEvent]) -> int:
        notifier, outbox = self.notifier, self.outbox

        def op(tx: Tx) -> int:
            written = transitions.append_events_written(
                tx, turn_id=turn_id, attempt=attempt, events=events, policy=self.policy
            )
            tx.announce([turn_id])

            def woken() -> None:
                # The turn's followers take the events from here, not from a read.
                notifier.notify(turn_id, written)
                outbox.wake()

            tx.after_commit(woken)
            return written.last_seq

        last = await self.db.write(op)
        self.metrics.events_appended.inc(len(events))
        return last

    async def park(
        self, *, turn_id: str, attempt: int, interrupt_json: str, events: Sequence[NewEvent]
    ) -> TurnRecord:
        def park(tx: Tx) -> Closed:
            closed = transitions.park_turn(
                tx,
                turn_id=turn_id,
                attempt=attempt,
                interrupt_json=interrupt_json,
                events=events,
                policy=self.policy,
            )
            return dataclasses.replace(closed, turn=lifecycle.on_parked(tx, closed.turn))

        # The turn's followers take its last events and its state from the news.
        turn = (await self._write(lambda _: [turn_id], park, lambda c: c)).turn
        self.metrics.events_appended.inc(len(events))
        turn_log(log, turn_id, attempt).info("parked at seq %d", turn.last_seq)
        try:
            await self.hand_to_queued_run(thread_id=turn.thread_id)
        except Exception:
            # The park stands; the queued run starts at the thread's next run.
            log.exception("turn %s parked; handing its thread to a queued run failed", turn_id)
        return turn

    async def finish(
        self, *, turn_id: str, attempt: int, failed: bool, error: str, events: Sequence[NewEvent]
    ) -> TurnRecord:
        def finish(tx: Tx) -> tuple[Closed, Ended]:
            closed = transitions.finish_turn(
                tx,
                turn_id=turn_id,
                attempt=attempt,
                failed=failed,
                error=error,
                events=events,
                policy=self.policy,
            )
            return closed, lifecycle.after_end(tx, closed.turn, self.policy)

        # The turn's followers take its last events and its end from the news.
        closed, ended = await self._write(lambda _: [turn_id], finish, lambda r: r[0])
        turn = closed.turn
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
                transitions.resume_detached(
                    tx, turn_id=turn_id, resume_json=resume_json, policy=self.policy
                ),
            ),
        )
        self.metrics.resumes.inc()
        turn_log(log, turn_id, turn.attempts).info("resumed: RUNNING, waiting for a replica")
        return turn, await self.handoffs.dispatch(turn, reason="resume")

    async def claim(
        self, *, turn_id: str, attempt: int, replica: str, incarnation: str, served: Served
    ) -> tuple[TurnRecord, str, bool]:
        """Claim the turn: (the turn, the checkpoint to continue from, whether its
        thread has no root checkpoint yet, read in the claim's own transaction)."""

        def op(tx: Tx) -> tuple[TurnRecord, str, bool]:
            # The claim's own checks first (the attempt, another live owner: ABORTED),
            # then the version policy's; its refusal rolls the claim back.
            before = transitions.lock_turn(tx, turn_id)
            _, checkpoint_id, thread_empty = transitions.claim_turn(
                tx,
                turn_id=turn_id,
                attempt=attempt,
                replica=replica,
                incarnation=incarnation,
                policy=self.policy,
            )
            versions.check_claim(tx, before, self.versions.policies.of(before.agent), served)
            versions.record_runner(tx, turn_id, served)
            return transitions.reload_turn(tx, turn_id), checkpoint_id, thread_empty

        # A claim changes who runs the turn, nothing its followers keep.
        claimed = await self._write(lambda r: [r[0].turn_id], op, OWNED)
        turn_log(log, turn_id, attempt).info(
            "claimed by %s/%s (checkpoint %s)", replica, incarnation, claimed[1] or "none"
        )
        return claimed

    async def redrive_replica(
        self, *, agent: str, replica: str, incarnation: str, served: Served
    ) -> list[Redriven]:
        """The startup Redrive: the replica's orphans and the agent's unowned turns,
        those its graph version may take (journal/versions.py). The others are
        re-driven to nobody and handed to a replica whose version may take them."""
        policy = self.versions.policies.of(agent)

        def op(tx: Tx) -> tuple[list[Redriven], list[Redriven]]:
            # The startup Redrive is how a replica announces its agent, and its graph
            # gets its default assistant (LangGraph's, one per graph).
            agents.announce(tx, agent)
            ensure_default(tx, agent, time.time())

            def may_take(turn: TurnRecord) -> bool:
                need = versions.requirement(tx.conn, tx.checkpoints, turn)
                return versions.refusal(policy, need, served) is None

            taken, elsewhere = containment.redrive_replica(
                tx,
                agent=agent,
                replica=replica,
                incarnation=incarnation,
                policy=self.policy,
                may_take=may_take,
            )
            taken = self._capped(tx, taken)
            for r in taken:
                if not r.failed_at_cap:
                    versions.record_runner(tx, r.turn.turn_id, served)
            # The records as they are now, with the version just recorded.
            return [
                dataclasses.replace(r, turn=transitions.reload_turn(tx, r.turn.turn_id))
                for r in taken
            ], self._capped(tx, elsewhere)

        taken, elsewhere = await self._write(lambda rs: [r.turn.turn_id for r in rs[0] + rs[1]], op)
        self._count(taken + elsewhere, "startup")
        for r in elsewhere:
            if not r.failed_at_cap:
                self.handoffs.dispatch_later(r.turn, reason="redrive, for another version")
        return taken

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
        return redriven, await self.handoffs.dispatch(redriven.turn, reason="redrive")

    async def reap(self, expired_before: float | None = None) -> list[Redriven]:
        """Re-drive turns whose lease expired (before `expired_before`, when given)
        and hand each to a live replica."""
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
        alive = await self._still_running(expired_before)

        def reap(tx: Tx) -> list[Redriven]:
            # Those whose agent still runs them keep them, with a fresh lease.
            for turn in containment.renew_alive(tx, alive, self.policy):
                turn_log(log, turn.turn_id, turn.attempts).warning(
                    "lease lapsed, but replica %s/%s answers that it still runs it: "
                    "lease renewed (its heartbeats came late: a busy machine, not a "
                    "dead agent)",
                    turn.owner_replica,
                    turn.owner_incarnation,
                )
            return self._capped(
                tx, containment.reap_expired(tx, policy=self.policy, expired_before=expired_before)
            )

        redriven = await self._write(lambda rs: [r.turn.turn_id for r in rs], reap)
        self._count(redriven, "lease")
        for r in redriven:
            if not r.failed_at_cap:
                self.handoffs.dispatch_later(r.turn, reason="lease-expired")
        return redriven

    async def _still_running(self, expired_before: float | None) -> dict[tuple[str, str], int]:
        """The lapsed leases whose agents answer that they still run the turn, asked
        of each owner (agent, incarnation) at once over NATS: {(turn_id,
        incarnation): attempt}. A turn is orphaned only when its agent is gone."""
        owners = containment.lapsed_owners(self.db.read_conn(), expired_before=expired_before)
        if not owners:
            return {}
        keys = list(owners)
        answers = await asyncio.gather(
            *(self.handoffs.alive(key[0], key[2], owners[key]) for key in keys),
            return_exceptions=True,
        )
        alive: dict[tuple[str, str], int] = {}
        for key, running in zip(keys, answers, strict=True):
            if isinstance(running, BaseException):
                continue
            for turn_id in running:
                alive[(turn_id, key[2])] = owners[key][turn_id]
        return alive

    # -- graph versions (docs/versions.md) ------------------------------------------------

    def waiting_turns(self, agent: str, limit: int = 500) -> list[Waiting]:
        """The agent's RUNNING turns nobody owns that no live replica may take."""
        rows = self.list_turns(state=RUNNING, agent=agent, thread_id="", before=None, limit=limit)
        out = []
        for _, turn in rows:
            waiting = self.versions.waiting(turn)
            if waiting is not None:
                out.append(waiting)
        return out

    async def migrate(
        self,
        *,
        agent: str,
        to_fingerprint: str,
        from_fingerprint: str,
        turn_ids: Sequence[str],
        dry_run: bool,
    ) -> list[str]:
        """Move the agent's waiting (RUNNING, unowned) and PARKED turns to a graph
        version a live replica serves: the policy then lets that version take them.
        A RUNNING one is handed to such a replica at once."""
        target = next(
            (r for r in self.versions.directory.replicas(agent) if r.fingerprint == to_fingerprint),
            None,
        )
        if target is None:
            live = sorted(
                {describe(r.fingerprint, r.label) for r in self.versions.directory.replicas(agent)}
            )
            raise WrongState(
                f"no live replica of agent {agent!r} serves graph version {short(to_fingerprint)}"
                f"; live versions: {', '.join(live) or 'none'} (turnkeeper agents lists them)"
            )
        wanted = set(turn_ids)

        def chosen(turn: TurnRecord) -> bool:
            if wanted and turn.turn_id not in wanted:
                return False
            if turn.state == RUNNING and turn.owned:
                return False
            need = self.versions.requirement(turn)
            current = need.fingerprint if need is not None else ""
            if current == to_fingerprint:
                return False
            return not from_fingerprint or current == from_fingerprint

        candidates = [
            turn
            for state in (RUNNING, PARKED)
            for _, turn in self.list_turns(
                state=state, agent=agent, thread_id="", before=None, limit=10_000
            )
            if chosen(turn)
        ]
        if wanted - {t.turn_id for t in candidates}:
            missing = sorted(wanted - {t.turn_id for t in candidates})
            raise WrongState(
                f"turn(s) {', '.join(missing)} of agent {agent!r} are not waiting or parked "
                f"on another version than {short(to_fingerprint)}: nothing to move"
            )
        if dry_run or not candidates:
            return [t.turn_id for t in candidates]
        served = Served(target.fingerprint, target.label, target.shape)

        def op(tx: Tx) -> list[TurnRecord]:
            moved = []
            for turn in candidates:
                current = transitions.lock_turn(tx, turn.turn_id)
                if current.state not in (RUNNING, PARKED) or current.owned:
                    continue  # taken or ended since: left as it is
                versions.record_runner(tx, turn.turn_id, served)
                moved.append(transitions.reload_turn(tx, turn.turn_id))
            return moved

        moved = await self._write(lambda ts: [t.turn_id for t in ts], op)
        for turn in moved:
            turn_log(log, turn.turn_id, turn.attempts).info(
                "moved to graph version %s by an operator",
                describe(served.fingerprint, served.label),
            )
            if turn.state == RUNNING:
                self.handoffs.dispatch_later(turn, reason="migrated")
        return [t.turn_id for t in moved]

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

    # -- cancel, erasure and the queue ---------------------------------------------------

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

    async def hand_to_queued_run(self, *, thread_id: str) -> TurnRecord | None:
        """A LangGraph API run queued behind the thread's parked turn starts, the
        parked one ends answered (journal/lifecycle.py `hand_to_queued_run`)."""
        # Read first: most parks have nothing queued, and cost no second write.
        if await self.db.read(lambda conn: lifecycle.queued_run(conn, thread_id)) is None:
            return None
        return await self._close(
            lambda tx: lifecycle.hand_to_queued_run(tx, thread_id, policy=self.policy),
            "a queued run took its thread",
        )

    async def close_parked(self, *, thread_id: str, detail: str) -> TurnRecord | None:
        """The thread's parked turn ends DONE, answered by the thread's next LangGraph
        API run (journal/lifecycle.py `close_parked`); None when none was parked."""
        return await self._close(
            lambda tx: lifecycle.close_parked(tx, thread_id, detail=detail, policy=self.policy),
            detail,
        )

    async def _close(
        self, fn: Callable[[Tx], tuple[TurnRecord, Ended] | None], why: str
    ) -> TurnRecord | None:
        closed = await self._write(
            lambda c: (
                [c[0].turn_id] + ([c[1].promoted.turn_id] if c[1].promoted else []) if c else []
            ),
            fn,
        )
        if closed is None:
            return None
        turn, ended = closed
        self.metrics.turns_finished.labels(state=turn.state).inc()
        turn_log(log, turn.turn_id, turn.attempts).info("done (%s)", why)
        self._after_end(ended, turn)
        return turn

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

    async def delete(self, turn_id: str) -> TurnRecord:
        """A finished turn's rows (journal/erasure.py `delete_turn`)."""
        deleted = await self._write(
            lambda t: [t.turn_id],
            lambda tx: erasure.delete_turn(tx, turn_id=turn_id, policy=self.policy),
        )
        turn_log(log, turn_id, deleted.attempts).info("deleted (a finished run)")
        return deleted

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
            self.handoffs.stop_later(turn)
        if ended.promoted is not None:
            self.notifier.notify(ended.promoted.turn_id)
            turn_log(log, ended.promoted.turn_id, 0).info(
                "dequeued on thread %s: RUNNING, waiting for a replica", turn.thread_id
            )
            self.handoffs.dispatch_later(ended.promoted, reason="dequeued")
