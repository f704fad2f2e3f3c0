"""Drains the outbox table (turns.db, or PostgreSQL) to NATS.

Rows are written in the same transaction as the change they mirror (an event
appended, a rewind, a synthetic terminal event), so a NATS outage or a crash of
the service loses nothing: the backlog is published, in id order, once NATS is
reachable again. Each message carries its outbox id as `Nats-Msg-Id`. How rows are
taken and deleted is the store's (`drain_outbox`): on PostgreSQL several replicas
drain one outbox without two publishing the same row at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from turnkeeper_server.messaging.link import NatsLink
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.store.contract import Store
from turnkeeper_server.store.records import OutboxRow

log = logging.getLogger(__name__)

BATCH = 512
# After a batch refused with NATS connected (a message the server will never take,
# decision 504): the first wait before trying again, and the longest.
RETRY_FIRST = 0.5
RETRY_MAX = 5.0


class OutboxPublisher:
    def __init__(
        self,
        db: Store,
        link: NatsLink,
        *,
        idle_poll: float = 0.5,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        self.link = link
        # The server passes its registry's; a publisher on its own (tests) gets one.
        self.metrics = metrics if metrics is not None else Metrics()
        self.idle_poll = idle_poll
        self._wake = asyncio.Event()
        # Set whenever a look at the outbox found it empty and no commit woke the
        # publisher while it looked; cleared by new rows.
        self._drained = asyncio.Event()
        # Counts wakes: a look that began before the last one may have missed its rows.
        self._wakes = 0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._stopped = asyncio.Event()
        self.published = 0
        self.failures = 0

    def wake(self) -> None:
        """Called after a commit that wrote outbox rows."""
        self._wakes += 1
        self._drained.clear()
        self._wake.set()

    async def wait_drained(self) -> None:
        """Until everything written so far has been published."""
        await self._drained.wait()

    def backlog(self) -> int:
        return self.db.outbox_backlog()

    async def start(self) -> None:
        if self.link.enabled:
            self._task = asyncio.create_task(self._run(), name="outbox-publisher")

    async def _run(self) -> None:
        retry = RETRY_FIRST
        while not self._stopping:
            # Cleared before the look: a commit whose wake this clears committed
            # before it, so the look sees its rows; a later one wakes us again.
            self._wake.clear()
            failures = self.failures
            try:
                sent = await self.drain_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("outbox publisher failed; retrying")
                sent = 0
            if self.failures > failures and self.link.connected:
                # Refused with the connection up: the same batch again at every
                # commit would only be refused again (decision 504).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), retry)
                retry = min(retry * 2, RETRY_MAX)
                continue
            if sent:
                retry = RETRY_FIRST
            if sent >= BATCH or (sent and self._wake.is_set()):
                continue  # more may be waiting
            if sent:
                # Less than a batch: the look took every row there was, and no
                # commit wrote one since. No second look only to find none.
                self._drained.set()
            if not self.link.connected:
                await self.link.wait_connected(self.idle_poll)
                continue
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.idle_poll):
                    await self._wake.wait()

    async def drain_once(self) -> int:
        """Publish one batch; returns how many rows left the outbox."""
        if not self.link.connected:
            return 0
        failed = False
        wakes = self._wakes

        async def publish(rows: list[OutboxRow]) -> bool:
            # A drain may publish twice (PostgreSQL: orphans, then its own rows).
            nonlocal failed
            ok = await self.link.publish_batch(rows)
            failed = failed or not ok
            return ok

        sent = await self.db.drain_outbox(BATCH, publish)
        if failed:
            self.failures += 1
            self.metrics.outbox_failures.inc()
            return 0
        if not sent:
            # Empty when it looked; a commit that woke us during the look (the look
            # awaits: PostgreSQL's in a thread) may have rows it did not see.
            if self._wakes == wakes:
                self._drained.set()
            return 0
        self.published += sent
        self.metrics.outbox_published.inc(sent)
        return sent

    async def flush(self, timeout: float) -> int:
        """Publish what is left, for shutdown; returns the backlog left behind."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.link.connected:
            if await self.drain_once() == 0:
                break
        return self.backlog()

    async def stop(self) -> None:
        """Let the batch in flight finish (cancelling it mid-flush would leave the
        connection in doubt), then stop; `flush` publishes the rest."""
        self._stopping = True
        self._stopped.set()
        self._wake.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout=10)
            except TimeoutError:
                log.warning("outbox publisher did not stop in time")
            self._task = None
