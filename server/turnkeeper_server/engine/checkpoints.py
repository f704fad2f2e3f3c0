"""The engine's checkpoints: LangGraph's saver operations, committed through the store.

A write is the journal's (journal/checkpoints.py: fenced, with its boundary) in one
transaction of the store. A graph step hands its saver its tasks' writes and the
next checkpoint together; `write_batch` decides how such a batch reaches the store:
queued back to back where the store runs writes one at a time in order (SQLite's
writer commits them in one group), else in one transaction, and if one write is
refused there, each in a transaction of its own so only the refused one is left out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from turnkeeper_server.engine.watch import TurnNotifier
from turnkeeper_server.errors import TurnkeeperError, Unavailable
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

    async def write(self, checkpoint_write: CheckpointWrite) -> None:
        await self.db.write(self._one(checkpoint_write))

    async def write_batch(
        self, writes: Sequence[CheckpointWrite], *, followed: bool
    ) -> list[asyncio.Future[None]]:
        """Start committing `writes` in order; per write, a future set once it is
        durable, or with why it alone was refused. Returns once they are queued
        (where the store queues writes) or committed. `followed`: the caller
        queues another write right after these (the store may wait for it, to
        commit both at once)."""
        if self.db.queues_writes:
            last = len(writes) - 1
            return [
                self.db.queue_write(self._one(w), followed=k < last or followed)
                for k, w in enumerate(writes)
            ]
        return [_settled(refusal) for refusal in await self._together(writes)]

    async def _together(self, writes: Sequence[CheckpointWrite]) -> list[TurnkeeperError | None]:
        """`writes` in one transaction; per write, None or why it was refused. A
        refusal (a stale fence, say) rolls the transaction back, and then each write
        runs in a transaction of its own, so only the refused ones are left out."""

        def together(tx: Tx) -> list[TurnkeeperError | None]:
            for w in writes:
                self._written(tx, write(tx, w, self.policy))
            return [None] * len(writes)

        if len(writes) > 1:
            try:
                return await self.db.write(together)
            except Unavailable as exc:
                # The database is away: running each on its own would only wait for
                # the pool again per write. Every write is refused alike.
                return [exc] * len(writes)
            except TurnkeeperError:
                pass
        outcomes: list[TurnkeeperError | None] = []
        for w in writes:
            try:
                await self.write(w)
                outcomes.append(None)
            except TurnkeeperError as exc:
                outcomes.append(exc)
        return outcomes

    def _one(self, checkpoint_write: CheckpointWrite) -> Callable[[Tx], None]:
        """The store operation of one write."""

        def write_one(tx: Tx) -> None:
            self._written(tx, write(tx, checkpoint_write, self.policy))

        return write_one

    def _written(self, tx: Tx, turn_id: str | None) -> None:
        if turn_id is not None:
            notify = self.notifier.notify
            tx.after_commit(lambda: notify(turn_id))

    # -- LangGraph's extended saver operations --------------------------------------

    async def prune_threads(self, thread_ids: Sequence[str], strategy: str) -> int:
        return await self.db.write(lambda tx: maintenance.prune(tx, thread_ids, strategy))

    async def delete_for_runs(self, run_ids: Sequence[str]) -> int:
        return await self.db.write(lambda tx: maintenance.delete_for_runs(tx, run_ids))

    async def copy_thread(self, source: str, target: str) -> int:
        return await self.db.write(lambda tx: maintenance.copy_thread(tx, source, target))


def _settled(refusal: TurnkeeperError | None) -> asyncio.Future[None]:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    if refusal is None:
        future.set_result(None)
    else:
        future.set_exception(refusal)
    return future
