"""The engine's part in a turn's whole life: cancel, the thread's queue moving on
when a turn ends, erasure of a thread, and LangGraph's extended checkpoint
operations (prune, delete_for_runs, copy_thread).

The transactions are the journal's (journal/lifecycle.py, journal/erasure.py,
journal/maintenance.py); what is here happens after they commit: the executor of
a cancelled turn is told to stop, and a promoted QUEUED turn is handed to a
replica. A mixin of `Engine`, kept apart so each module holds one concern.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from turnkeeper_server.journal import erasure, lifecycle, maintenance
from turnkeeper_server.journal.erasure import Erased
from turnkeeper_server.journal.lifecycle import Cancelled, Ended
from turnkeeper_server.journal.records import TurnRecord
from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.logs import turn_log
from turnkeeper_server.messaging.link import CANCEL_METHOD, control_subject

if TYPE_CHECKING:
    from turnkeeper_server.journal.records import Policy
    from turnkeeper_server.messaging.link import NatsLink
    from turnkeeper_server.metrics import Metrics
    from turnkeeper_server.store.contract import Store, Tx
    from turnkeeper_server.watch import TurnNotifier

log = logging.getLogger("turnkeeper_server.engine")

T = TypeVar("T")


class LifecycleOps:
    """Cancel, queue promotion, erasure and checkpoint maintenance (see the module
    docstring). `Engine` provides the attributes declared here."""

    db: Store
    policy: Policy
    notifier: TurnNotifier
    link: NatsLink
    metrics: Metrics
    namespace: str
    _dispatches: set[asyncio.Task[bool]]

    if TYPE_CHECKING:

        async def _write(
            self, turn_ids: Callable[[T], Sequence[str]], fn: Callable[[Tx], T]
        ) -> T: ...

        async def dispatch(self, turn: TurnRecord, *, reason: str) -> bool: ...

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
                tx,
                thread_id=thread_id,
                cancel=cancel,
                policy=self.policy,
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

    # -- LangGraph's extended saver operations --------------------------------------

    async def prune_threads(self, thread_ids: Sequence[str], strategy: str) -> int:
        return await self.db.write(lambda tx: maintenance.prune(tx, thread_ids, strategy))

    async def delete_for_runs(self, run_ids: Sequence[str]) -> int:
        return await self.db.write(lambda tx: maintenance.delete_for_runs(tx, run_ids))

    async def copy_thread(self, source: str, target: str) -> int:
        return await self.db.write(lambda tx: maintenance.copy_thread(tx, source, target))
