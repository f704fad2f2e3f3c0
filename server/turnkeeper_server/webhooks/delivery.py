"""The loop that delivers due webhooks: on every replica, at least once.

Each pass claims due deliveries (journal/webhooks.py `claim`: held for an attempt's
timeout plus a margin, its attempt row written in flight), sends each as an HTTP
POST with its signature (signing.py) to an address the policy allowed
(addresses.py), and records the outcome in one transaction, fenced by the claim:

- a 2xx answer: ``delivered``;
- an address the policy refuses: ``refused``, not retried (only the operator can
  change that, and the run was created before the policy or the DNS said so);
- anything else (no answer, a timeout, a non-2xx status, a name that does not
  resolve): retried after ``retry_base * 2**(n-1)`` seconds, at most ``retry_cap``,
  until ``max_attempts`` attempts, then ``failed``.

A replica killed during an attempt leaves the delivery claimed; when the claim
passes any replica (the same one restarted too) attempts it again with the same
``webhook-id``: the receiver may see a delivery twice, and deduplicates by that key.
Redirects are not followed (a redirect could lead anywhere the policy refuses).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from turnkeeper_server.journal import webhooks as rows
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.store.contract import Store
from turnkeeper_server.webhooks.addresses import AddressPolicy, PinnedResolver, Refused
from turnkeeper_server.webhooks.settings import WebhookSettings
from turnkeeper_server.webhooks.signing import SecretFile, headers

log = logging.getLogger(__name__)

# The run's webhook body for a delivery (its run state as it ended), or None when
# the run is gone (the web side builds it: web/langgraph/webhooks.py).
Payload = Callable[[str, str], Awaitable[dict[str, Any] | None]]
# How much of a receiver's answer is kept in the attempt's detail.
ANSWER_BYTES = 300


def backoff(settings: WebhookSettings, attempt: int) -> float:
    """Seconds to wait after failed attempt number `attempt` (1, 2, ...)."""
    return float(min(settings.retry_cap, settings.retry_base * 2 ** (attempt - 1)))


def bounded_body(payload: dict[str, Any], limit: int) -> bytes:
    """The body as sent: at most `limit` bytes. Values that make it larger are left
    out and said so; a body too large without them too is a ValueError."""
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str).encode()
    if len(body) <= limit:
        return body
    payload = {
        **payload,
        "values": None,
        "values_omitted": (
            f"the run's values make the body larger than the webhook limit of {limit} "
            "bytes; read them with threads.get_state"
        ),
    }
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), default=str).encode()
    if len(body) > limit:
        raise ValueError(f"the webhook body is larger than {limit} bytes without its values")
    return body


class WebhookDeliverer:
    def __init__(
        self,
        db: Store,
        settings: WebhookSettings,
        payload: Payload,
        *,
        replica: str = "",
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        # The server passes its registry's; a deliverer on its own (tests) gets one.
        self.metrics = metrics if metrics is not None else Metrics()
        self.settings = settings
        self.payload = payload
        self.policy = AddressPolicy.parse(settings.allow)
        self.secrets = SecretFile(settings.secret_file) if settings.secret_file else None
        self.replica = replica or f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._stopping = False
        # Called with (run id, outcome) once an attempt's outcome is recorded.
        self.on_attempt: list[Callable[[str, str], None]] = []

    def wake(self) -> None:
        self._wake.set()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="webhook-deliverer")

    async def stop(self) -> None:
        """Stop claiming; attempts in flight are cancelled and their deliveries given
        back, due at once for whichever replica (or this one, restarted) comes next.
        A replica killed instead leaves its claims to pass."""
        self._stopping = True
        self._wake.set()
        for task in [self._task, *self._inflight]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._task = None
        try:
            await self.db.write(lambda tx: rows.release(tx, replica=self.replica, now=time.time()))
        except Exception as exc:
            log.warning("webhook claims not given back at stop (%s); they will pass", exc)

    async def _run(self) -> None:
        while not self._stopping:
            try:
                claimed = await self.deliver_due()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("webhook delivery pass failed; trying again")
                claimed = 0
            if claimed:
                continue
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.settings.poll)

    async def deliver_due(self) -> int:
        """Claim what is due and start an attempt at each; returns how many."""
        room = self.settings.concurrency - len(self._inflight)
        if room <= 0:
            return 0
        # A read first: the claim is a write, and the writer (SQLite's one thread)
        # is not taken every poll for nothing.
        due = await self.db.read(rows.next_due)
        if due is None or due > time.time():
            return 0
        hold = self.settings.hold
        claimed = await self.db.write(
            lambda tx: rows.claim(tx, replica=self.replica, now=time.time(), hold=hold, limit=room)
        )
        for delivery in claimed:
            task = asyncio.create_task(self._attempt(delivery), name="webhook-attempt")
            self._inflight.add(task)
            task.add_done_callback(self._done)
        return len(claimed)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._inflight.discard(task)
        self._wake.set()

    async def _attempt(self, delivery: rows.Delivery) -> None:
        status: int | None = None
        try:
            body = await self._body(delivery)
            status, detail = await self._send(delivery, body)
            outcome = rows.DELIVERED if 200 <= status < 300 else "retry"
        except Refused as exc:
            outcome, detail = rows.REFUSED, str(exc)
        except _Gone as exc:
            outcome, detail = rows.FAILED_DELIVERY, str(exc)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            outcome, detail = "retry", f"{type(exc).__name__}: {exc}" if str(exc) else repr(exc)
        now = time.time()
        retry_at: float | None = None
        if outcome == "retry":
            if delivery.attempts >= self.settings.max_attempts:
                outcome = rows.FAILED_DELIVERY
                detail = f"{detail} (gave up after {delivery.attempts} attempts)"
            else:
                retry_at = now + backoff(self.settings, delivery.attempts)
        self.metrics.webhook_attempts.labels(outcome=outcome).inc()
        if outcome != rows.DELIVERED:
            log.warning(
                "webhook of run %s, attempt %d: %s: %s",
                delivery.turn_id,
                delivery.attempts,
                outcome,
                detail,
            )
        await self.db.write(
            lambda tx: rows.finish_attempt(
                tx,
                turn_id=delivery.turn_id,
                attempt=delivery.attempts,
                replica=self.replica,
                outcome=outcome,
                http_status=status,
                detail=detail,
                retry_at=retry_at,
                now=now,
            )
        )
        for hook in self.on_attempt:
            hook(delivery.turn_id, outcome)

    async def _body(self, delivery: rows.Delivery) -> bytes:
        if delivery.payload is not None:
            return delivery.payload.encode()
        payload = await self.payload(delivery.turn_id, delivery.run_state)
        if payload is None:
            raise _Gone(f"run {delivery.turn_id} is no longer in the journal")
        try:
            body = bounded_body(payload, self.settings.max_body_bytes)
        except ValueError as exc:
            raise _Gone(str(exc)) from None
        text = body.decode()
        await self.db.write(lambda tx: rows.save_payload(tx, delivery.turn_id, text))
        return body

    async def _send(self, delivery: rows.Delivery, body: bytes) -> tuple[int, str]:
        if self.secrets is None:
            raise RuntimeError("the service has no webhook secret (--webhook-secret-file)")
        target = self.policy.target(delivery.url)
        addresses = await self.policy.resolve(target)
        sent = headers(self.secrets.current(), delivery.turn_id, int(time.time()), body)
        connector = aiohttp.TCPConnector(
            resolver=PinnedResolver(target.host, addresses), force_close=True
        )
        timeout = aiohttp.ClientTimeout(total=self.settings.timeout)
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
            session.post(delivery.url, data=body, headers=sent, allow_redirects=False) as answer,
        ):
            text = (await answer.content.read(ANSWER_BYTES)).decode(errors="replace")
            return answer.status, f"HTTP {answer.status} {text}".strip()


class _Gone(Exception):
    """The delivery cannot be made, ever: the run is gone, or its body too large."""
