"""Group commit: one writer thread per store runs the queued writes, whatever is
queued at once in one transaction, and acknowledges them together.

Both backends write this way (decision 265). The callers' event loops queue
operations (functions of a transaction) and await futures; the writer thread takes
every operation queued at that moment (up to MAX_GROUP) as a group, and hands it to
the backend's `run_group`, which runs the group in one transaction and commits it:
one commit, one WAL flush, for many turns' writes. Operations run in the order they
were queued, so a caller may queue its next write before the previous one
committed (a checkpoint stream's batch) and order holds. A future resolves only
after its group committed, on its caller's loop, after-commit callbacks first:
nothing is acknowledged before it is durable.

A write no caller waits for and that may wait a little (the outbox publisher's
delete of the rows it published) *rides*: it joins the next group the writer
commits anyway, ahead of that group's operations, and commits alone only after
RIDE_WAIT without other writes. A later rider of the same key replaces one not yet
taken (a delete up to a later id covers the earlier). So the NATS mirror costs the
journal no commit of its own while turns are being written (decision 372).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar

from turnkeeper import _tracing as tracing

from turnkeeper_server.store.contract import WRITE_FOLLOWED, WRITE_QUEUED

log = logging.getLogger(__name__)

T = TypeVar("T")

# Operations per group commit; bounds the latency one slow group adds to the next.
MAX_GROUP = 256
# How long the writer waits for a write announced to follow (WRITE_FOLLOWED) before
# it commits without it: the caller queues it on its event loop's next turns.
FOLLOW_WAIT = 0.002
# How long a rider waits for a group to join before it commits alone.
RIDE_WAIT = 0.05
# Put in the queue by the first rider after none: the writer then waits RIDE_WAIT.
_RIDE: Final = object()


@dataclass
class Job(Generic[T]):
    """One queued operation: a function of the backend's transaction."""

    fn: Callable[[Any], T]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]
    after: list[Callable[[], None]] = field(default_factory=list)
    # The W3C traceparent of the caller (tracing on only): contextvars do not
    # cross into the writer thread.
    trace: str | None = None
    # Its caller queues another write right behind it (contract.WRITE_FOLLOWED).
    followed: bool = False


# What a group's run reports per job, in the group's order: (job, ok, result or error).
Settled = list[tuple[Job[Any], bool, Any]]


class GroupWriter:
    """The queue and the writer thread; `run_group` is the backend's transaction."""

    def __init__(self, name: str, run_group: Callable[[list[Job[Any]]], None]) -> None:
        self.name = name
        self.run_group = run_group
        # Set by the server when tracing is on.
        self.traced = False
        self._queue: queue.SimpleQueue[Job[Any] | object | None] = queue.SimpleQueue()
        # Riders by key, not yet taken into a group (guarded by _lock).
        self._riders: dict[str, Job[Any]] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def start(self, on_exit: Callable[[], None] = lambda: None) -> None:
        """Start the thread; `on_exit` runs on it once it stops (closing what the
        groups ran on)."""
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._loop, args=(ready, on_exit), name=self.name, daemon=True
        )
        self._thread.start()
        ready.wait()

    def stop(self) -> None:
        """Finish what is queued, then stop the thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()

    async def write(self, fn: Callable[[Any], T]) -> T:
        """Queue `fn` and return its result once its group is durable."""
        future = self.queue(fn, followed=WRITE_FOLLOWED.get())
        if (queued := WRITE_QUEUED.get()) is not None:
            queued()  # first in first out: the caller's next write runs after this one
        return await future

    def queue(self, fn: Callable[[Any], T], *, followed: bool = False) -> asyncio.Future[T]:
        """Queue `fn` now, behind every write queued before it; the future is set
        once it is durable."""
        if self._closed:
            raise RuntimeError("database is closed")
        loop = asyncio.get_running_loop()
        job: Job[T] = Job(fn, loop, loop.create_future(), followed=followed)
        if self.traced:
            carrier: dict[str, str] = {}
            tracing.inject(carrier)
            job.trace = carrier.get("traceparent")
        self._queue.put(job)
        return job.future

    def ride(self, key: str, fn: Callable[[Any], T]) -> asyncio.Future[T]:
        """Queue `fn` to ride the next group (see the module docstring), replacing
        the rider of `key` not yet taken, whose future then resolves to None."""
        if self._closed:
            raise RuntimeError("database is closed")
        loop = asyncio.get_running_loop()
        job: Job[T] = Job(fn, loop, loop.create_future())
        with self._lock:
            replaced = self._riders.pop(key, None)
            first = not self._riders
            self._riders[key] = job
        if replaced is not None and not replaced.future.done():
            replaced.future.set_result(None)
        if first:
            self._queue.put(_RIDE)
        return job.future

    def _take_riders(self) -> list[Job[Any]]:
        with self._lock:
            riders = list(self._riders.values())
            self._riders.clear()
        return riders

    def _loop(self, ready: threading.Event, on_exit: Callable[[], None]) -> None:
        ready.set()
        stop = False
        try:
            while not stop:
                first = self._queue.get()
                if first is _RIDE:
                    # A rider waits a little for a group to join.
                    try:
                        first = self._queue.get(timeout=RIDE_WAIT)
                    except queue.Empty:
                        first = _RIDE
                if first is None:
                    stop = True
                group: list[Job[Any]] = []
                if isinstance(first, Job):
                    group.append(first)
                while not stop and len(group) < MAX_GROUP:
                    try:
                        if group and group[-1].followed:
                            # The next write of the same batch is microseconds away.
                            job = self._queue.get(timeout=FOLLOW_WAIT)
                        else:
                            job = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        stop = True
                    elif isinstance(job, Job):
                        group.append(job)
                group = self._take_riders() + group
                if not group:
                    continue
                try:
                    self.run_group(group)
                except Exception as exc:  # a backend's bug: never leave a caller waiting
                    log.exception("group commit of %d operations failed", len(group))
                    settle([(job, False, exc) for job in group])
        finally:
            on_exit()


def settle(settled: Settled) -> None:
    """Resolve a group's futures on their loops: one hand-off per loop, not per job
    (each call_soon_threadsafe writes to the loop's self-pipe)."""
    by_loop: dict[asyncio.AbstractEventLoop, Settled] = {}
    for item in settled:
        by_loop.setdefault(item[0].loop, []).append(item)
    for loop, items in by_loop.items():
        # A closed loop raises RuntimeError: nobody is waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_resolve, items)


def _resolve(items: Settled) -> None:
    """On the loop, in the group's order: after-commit callbacks, then the result.
    The callbacks of a committed operation run even when its caller no longer waits
    (cancelled): what it committed still wakes the turn's followers and the outbox
    publisher (decision 764)."""
    for job, ok, value in items:
        if ok:
            for callback in job.after:
                try:
                    callback()
                except Exception:
                    log.exception("after-commit callback failed")
        if job.future.done():
            continue
        if ok:
            job.future.set_result(value)
        else:
            job.future.set_exception(value)
