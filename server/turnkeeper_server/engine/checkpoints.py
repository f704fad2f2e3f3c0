"""The engine's checkpoints: LangGraph's saver operations, committed through the store.

A write is the journal's (journal/checkpoints.py: fenced, with its boundary) in one
transaction of the store. A graph step hands its saver its tasks' writes and the
next checkpoint together; `write_batch` queues them back to back, and the store's
writer commits them in one group (a refused one is left out alone).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from turnkeeper_server.engine.watch import Settled, TurnNotifier
from turnkeeper_server.journal import maintenance
from turnkeeper_server.journal.checkpoints import CheckpointWrite, write
from turnkeeper_server.records import Policy
from turnkeeper_server.store.contract import Store, Tx
from turnkeeper_server.store.records import CheckpointQuery, CheckpointRow


class Checkpoints:
    def __init__(self, db: Store, notifier: TurnNotifier, policy: Policy) -> None:
        self.db = db
        # A turn's checkpoint may announce superseded effects in its events.
        self.policy = policy
        # A turn's checkpoint moves its boundary: what its events' watchers that
        # show only settled events (the LangGraph API's streams) wait for.
        self.notifier = notifier

    # -- reads --------------------------------------------------------------------

    async def get(
        self, thread_id: str, checkpoint_ns: str, checkpoint_id: str
    ) -> CheckpointRow | None:
        return await self.db.read(
            lambda conn: self.db.checkpoints.get(conn, thread_id, checkpoint_ns, checkpoint_id)
        )

    async def search(self, query: CheckpointQuery) -> list[CheckpointRow]:
        return await self.db.read(lambda conn: list(self.db.checkpoints.list_(conn, query)))

    # -- writes -------------------------------------------------------------------

    async def write(self, checkpoint_write: CheckpointWrite) -> int | None:
        """Commit one write; for a turn's checkpoint, the turn's last_seq it records
        as its boundary (the writer's next event comes after it), else None."""
        return await self.db.write(self._one(checkpoint_write))

    async def write_batch(
        self, writes: Sequence[CheckpointWrite], *, followed: bool
    ) -> list[asyncio.Future[int | None]]:
        """Start committing `writes` in order; per write, a future set once it is
        durable (to what `write` returns), or with why it alone was refused.
        Returns once they are queued. `followed`: the caller queues another write
        right after these (the store may wait for it, to commit both at once)."""
        last = len(writes) - 1
        return [
            self.db.queue_write(self._one(w), followed=k < last or followed)
            for k, w in enumerate(writes)
        ]

    def _one(self, checkpoint_write: CheckpointWrite) -> Callable[[Tx], int | None]:
        """The store operation of one write."""

        def write_one(tx: Tx) -> int | None:
            boundary = write(tx, checkpoint_write, self.policy)
            if boundary is None:
                return None
            notify, turn_id = self.notifier.notify, boundary.turn_id
            row = checkpoint_write.row
            # A root checkpoint's boundary is the turn's settled limit (what its
            # followers keep, engine/watch.py); a subgraph's is not: they read.
            news = Settled(boundary.last_seq) if row.checkpoint_ns == "" else None
            tx.after_commit(lambda: notify(turn_id, news))
            return boundary.last_seq

        return write_one

    # -- LangGraph's extended saver operations --------------------------------------

    async def prune_threads(self, thread_ids: Sequence[str], strategy: str) -> int:
        return await self.db.write(lambda tx: maintenance.prune(tx, thread_ids, strategy))

    async def delete_for_runs(self, run_ids: Sequence[str]) -> int:
        return await self.db.write(lambda tx: maintenance.delete_for_runs(tx, run_ids))

    async def copy_thread(self, source: str, target: str) -> int:
        return await self.db.write(lambda tx: maintenance.copy_thread(tx, source, target))
