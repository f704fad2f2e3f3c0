"""Lease renewal off the event loop (decision 320).

An execution's lease says its agent is alive. Heartbeats sent from the bridge's
event loop said something else: that the loop was free. A node doing CPU-bound work
inside ``async def`` (or a blocking call there) holds the loop for as long as it
runs, the heartbeats wait behind it, the lease lapses, and the service re-drives a
turn whose agent is alive and working, again at each attempt, until the re-drive cap
fails it.

:class:`LeaseKeeper` renews every lease of one bridge from a thread of its own,
over a blocking client with its own channel (the same target, credentials and
token as the bridge's client). A busy loop delays nothing here; a dead process
stops its heartbeats, as it should. What the heartbeats learn goes back to the
loop: a refusal (the attempt was re-driven away, or the turn ended) and a lease
that lapsed because no heartbeat got through are reported to the execution with
``call_soon_threadsafe``.

A slow service is not a lost one (issue 51, decision 384). Each heartbeat may take
what is left of its lease to be answered (not a third of it), and the heartbeats of
different turns go out side by side (a few worker threads), so one slow answer holds
up no other turn's. A lease that lapsed while the service did answer, only late
(DEADLINE_EXCEEDED), is not given up: the service asks this replica before it
re-drives a lapsed lease (decision 382), and a refusal says for certain when it did.
Only a service that cannot be reached at all for a lease (UNAVAILABLE ...) makes the
execution stop by itself.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import grpc

from turnkeeper.agent.bridge._events import FENCED
from turnkeeper.agent.saver._stream import heard_from
from turnkeeper.client import ConnectionOptions, TurnkeeperClient
from turnkeeper.errors import TurnkeeperError
from turnkeeper.v1 import turns_pb2

log = logging.getLogger(__name__)

# Heartbeats in flight at once (of different turns): one slow answer delays no other.
WORKERS: Final = 4


@dataclass
class _Lease:
    request: turns_pb2.HeartbeatRequest
    lease: float
    interval: float
    due: float
    last_ok: float
    loop: asyncio.AbstractEventLoop
    on_refused: Callable[[TurnkeeperError], None]
    on_lapsed: Callable[[str], None]
    # Sent and not answered yet: not due again until it is.
    in_flight: bool = False


class LeaseKeeper:
    """Heartbeats for the executions of one bridge, from one thread."""

    def __init__(self, options: ConnectionOptions) -> None:
        self.options = options
        self._leases: dict[tuple[str, int], _Lease] = {}
        self._changed = threading.Condition()
        self._closed = False
        self._client: TurnkeeperClient | None = None
        self._thread: threading.Thread | None = None
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None

    def hold(
        self,
        request: turns_pb2.HeartbeatRequest,
        lease: float,
        *,
        on_refused: Callable[[TurnkeeperError], None],
        on_lapsed: Callable[[str], None],
        first: float | None = None,
    ) -> None:
        """Renew this attempt's lease every third of it until `release`, the first
        time after `first` seconds when given (a lease that starts shorter). Called
        from the loop; the callbacks run on it."""
        now = time.monotonic()
        interval = max(lease / 3, 0.05)
        entry = _Lease(
            request,
            lease,
            interval,
            now + (interval if first is None else min(first, interval)),
            now,
            asyncio.get_running_loop(),
            on_refused,
            on_lapsed,
        )
        with self._changed:
            if self._closed:
                return
            self._leases[(request.turn_id, request.attempt)] = entry
            if self._thread is None:
                self._client = TurnkeeperClient(self.options)
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    WORKERS, thread_name_prefix="turnkeeper-heartbeat"
                )
                self._thread = threading.Thread(
                    target=self._run, name="turnkeeper-leases", daemon=True
                )
                self._thread.start()
            self._changed.notify_all()

    def release(self, turn_id: str, attempt: int) -> None:
        with self._changed:
            self._leases.pop((turn_id, attempt), None)
            self._changed.notify_all()

    def close(self) -> None:
        """Stop renewing (the bridge stops); safe to call twice."""
        with self._changed:
            self._closed = True
            self._leases.clear()
            self._changed.notify_all()
            thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        if self._pool is not None:
            # A heartbeat in flight ends within its own deadline.
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def _next(self) -> tuple[tuple[str, int], _Lease] | None:
        """The lease due next that is not in flight, once it is due; None when closed."""
        with self._changed:
            while not self._closed:
                waiting = [item for item in self._leases.items() if not item[1].in_flight]
                if not waiting:
                    self._changed.wait()
                    continue
                key, entry = min(waiting, key=lambda item: item[1].due)
                wait = entry.due - time.monotonic()
                if wait <= 0:
                    entry.in_flight = True
                    return key, entry
                self._changed.wait(wait)
            return None

    def _run(self) -> None:
        while (found := self._next()) is not None:
            pool = self._pool
            if pool is None:
                return
            try:
                pool.submit(self._beat, *found)
            except RuntimeError:  # shut down meanwhile
                return

    def _beat(self, key: tuple[str, int], entry: _Lease) -> None:
        client = self._client
        if client is None:
            return
        outcome: Callable[[], None] | None = None
        # What is left of the lease (a third of it at least): a late answer that
        # still renews it counts.
        left = entry.lease - (time.monotonic() - entry.last_ok)
        try:
            client.heartbeat(entry.request, timeout=max(left, entry.interval, 1.0))
            entry.last_ok = time.monotonic()
            # The service answers: a checkpoint stream waiting on it waits on.
            heard_from(self.options.target)
        except FENCED as exc:
            outcome = functools.partial(entry.on_refused, exc)
        except TurnkeeperError as exc:
            slow = exc.code == grpc.StatusCode.DEADLINE_EXCEEDED
            if time.monotonic() - entry.last_ok > entry.lease and not slow:
                outcome = functools.partial(
                    entry.on_lapsed,
                    f"no heartbeat got through for {entry.lease:.1f}s, the lease lapsed ({exc})",
                )
            else:
                log.warning(
                    "turn_id=%s attempt=%d: heartbeat failed%s, retrying: %s",
                    entry.request.turn_id,
                    entry.request.attempt,
                    " (the service answers late: the turn is kept, the service asks "
                    "this replica before it re-drives it)"
                    if slow
                    else "",
                    exc,
                )
        with self._changed:
            entry.in_flight = False
            if self._leases.get(key) is not entry:
                return  # released meanwhile: nothing to report
            if outcome is not None:
                del self._leases[key]
            else:
                entry.due = time.monotonic() + entry.interval
            self._changed.notify_all()
        if outcome is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                entry.loop.call_soon_threadsafe(outcome)
