"""The bridge's NATS side: one queue subscription, one task per request.

nats-py runs a subscription's callback for one message at a time, so a handler
that awaited a turn (or even a slow service call) would hold up every request
behind it. The callback here only starts a task; every request gets an answer,
an error one if need be, and the answer goes out before any work it triggers
starts (``Reply.then``).

The connection is retried in the background until it is made (nats-py does not
retry a first connect), then nats-py reconnects and re-subscribes by itself; turns
already running go on over gRPC meanwhile (the startup re-drive waits for ready).

Ready means the server routes the subject to this subscription, and ``flush()``
after ``subscribe()`` does not prove it: nats-py writes flush's PING straight to
the socket, possibly ahead of a SUB still queued. A request sent on the same
connection after the SUB does, once it is answered: the server handles one
connection's commands in order, so it had the SUB before the request (whichever
replica of the queue group answers it). So after subscribing, and after every
reconnect, the subscriber sends ``turnkeeper/ping`` to the subject until an answer
comes back, and only then sets :attr:`NatsSubscriber.ready`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Final

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from turnkeeper import _tracing as tracing
from turnkeeper._nats_auth import NatsAuth
from turnkeeper.agent.bridge import _jsonrpc as jsonrpc
from turnkeeper.agent.bridge._announce import Announcer
from turnkeeper.agent.bridge._jsonrpc import INTERNAL_ERROR, Reply, Request, RpcError
from turnkeeper.errors import TurnkeeperError

log = logging.getLogger(__name__)

Dispatch = Callable[[Request], Awaitable[Reply]]

# Answered by the subscriber itself, never dispatched: the readiness probe.
PING: Final = "turnkeeper/ping"
PROBE_TIMEOUT: Final = 2.0


class NatsSubscriber:
    def __init__(
        self,
        url: str,
        subject: str,
        queue: str,
        dispatch: Dispatch,
        *,
        name: str,
        control_subject: str | None = None,
        auth: NatsAuth | None = None,
        check_isolation: bool = False,
        announcer: Announcer | None = None,
        version_subject: str | None = None,
        replica_subject: str | None = None,
    ) -> None:
        self.url = url
        # Hand-offs that carry their claim, to this incarnation alone (decision 590):
        # subscribed before the queue group, so its readiness probe proves it too.
        self.replica_subject = replica_subject
        self._replica: Subscription | None = None
        # Hand-offs for this replica's graph version only (docs/versions.md): the
        # service sends a turn that its agent's version policy keeps for a version
        # here, so only a replica that may take it gets it; one queue group per version.
        self.version_subject = version_subject
        self._version: Subscription | None = None
        # Says which agent this replica serves once subscribed (the assistants list).
        self.announcer = announcer
        self.auth = auth or NatsAuth()
        # A secured deployment: once subscribed, check that NATS keeps this agent to
        # its own subjects, and say so loudly where it does not.
        self.check_isolation = check_isolation
        #: After that check: True when NATS refused a subscription beyond this
        #: agent's own subjects; None until checked (or not checked).
        self.isolated: bool | None = None
        self._refused: asyncio.Event = asyncio.Event()
        self._checking: asyncio.Task[None] | None = None
        # Every replica hears it (no queue group): notifications such as a cancel,
        # which only the replica running the turn acts on.
        self.control_subject = control_subject
        self._control: Subscription | None = None
        self.subject = subject
        self.queue = queue
        self.dispatch = dispatch
        self.name = name
        self._nc: Client | None = None
        self._sub: Subscription | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._probing: asyncio.Task[None] | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        #: Set while the server is known to route the subject to this subscription.
        self.subscribed = asyncio.Event()
        #: The first connection attempt has an outcome: subscribed, or NATS away.
        self.settled = asyncio.Event()

    @property
    def connected(self) -> bool:
        return self._nc is not None and self._nc.is_connected

    @property
    def ready(self) -> bool:
        """Subscribed, probed, and connected now."""
        return self.subscribed.is_set() and self.connected

    async def start(self) -> None:
        self._connecting = asyncio.create_task(self._connect(), name="bridge-nats-connect")

    async def _connect(self) -> None:
        delay = 0.05
        while True:
            try:
                nc = await nats.connect(
                    self.url,
                    **self.auth.connect_kwargs(),
                    name=self.name,
                    connect_timeout=2,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.5,
                    disconnected_cb=self._disconnected,
                    reconnected_cb=self._reconnected,
                    error_cb=self._error,
                )
                break
            except Exception as exc:
                log.warning("NATS at %s not reachable (%s); retrying", self.url, exc)
                self.settled.set()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        self._nc = nc
        if self.replica_subject is not None:
            self._replica = await nc.subscribe(self.replica_subject, cb=self._on_message)
        self._sub = await nc.subscribe(self.subject, queue=self.queue, cb=self._on_message)
        if self.control_subject is not None:
            self._control = await nc.subscribe(self.control_subject, cb=self._on_message)
        if self.version_subject is not None:
            self._version = await nc.subscribe(
                self.version_subject,
                queue=f"{self.queue}.{self.version_subject.rsplit('.', 1)[-1]}",
                cb=self._on_message,
            )
        await self._probe(nc)
        self.settled.set()
        if self.announcer is not None and nc.is_connected:
            await self.announcer.start(nc)
        log.info("serving %s (queue group %s) on %s", self.subject, self.queue, self.url)
        if self.check_isolation:
            self._checking = asyncio.create_task(self._check_isolation(nc))

    async def _check_isolation(self, nc: Client, wait: float = 2.0) -> None:
        """Subscribe to every agent's requests, which NATS should refuse this agent
        (docs/operators.md, "The NATS side"); warn when it does not."""
        # "<prefix>.<ns>.agents.<name>.tasks" -> "<prefix>.<ns>.agents.>"
        everyone = self.subject.rsplit(".", 2)[0] + ".>"
        self._refused.clear()
        sub = await nc.subscribe(everyone)
        try:
            await nc.flush()
            # The server's refusal comes before the flush's answer; its callback
            # may run a moment later.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._refused.wait(), wait)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self.isolated = self._refused.is_set()
        if self.isolated:
            log.info("NATS keeps this agent to its own subjects (%s refused)", everyone)
        else:
            log.warning(
                "NATS lets this agent read %s: every agent's requests and hand-offs. Give "
                "each agent a NATS user allowed only its own subjects (docs/operators.md, "
                "'The NATS side'); the bundled nats-server does this by itself",
                everyone,
            )

    async def _probe(self, nc: Client) -> None:
        """Until a ping sent after the SUB is answered; then ready."""
        body = json.dumps(
            {"jsonrpc": "2.0", "id": f"probe-{uuid.uuid4().hex}", "method": PING}
        ).encode()
        delay = 0.05
        while True:
            try:
                await nc.request(self.subject, body, timeout=PROBE_TIMEOUT)
                break
            except Exception as exc:
                if nc.is_closed:
                    return
                log.debug("subscription probe unanswered (%r); again", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        if nc.is_connected:
            self.subscribed.set()

    async def _disconnected(self) -> None:
        self.subscribed.clear()
        log.warning("NATS connection lost; reconnecting")

    async def _reconnected(self) -> None:
        # nats-py sends the SUBs again itself; ready once a probe proves it. Not
        # awaited here: nats-py runs this callback inside its reconnect.
        log.info("NATS connection back")
        if self._nc is not None and (self._probing is None or self._probing.done()):
            self._probing = asyncio.create_task(self._probe(self._nc), name="bridge-nats-probe")

    async def _error(self, exc: Exception) -> None:
        if "permissions violation" in str(exc).lower():
            self._refused.set()
        log.debug("NATS error: %s", exc)

    async def _on_message(self, msg: Msg) -> None:
        task = asyncio.create_task(self._serve(msg))
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    async def _serve(self, msg: Msg) -> None:
        with contextlib.ExitStack() as spans:
            await self._serve_traced(msg, spans)

    async def _serve_traced(self, msg: Msg, spans: contextlib.ExitStack) -> None:
        request: Request | None = None
        reply: Reply | None = None
        try:
            request = dataclasses.replace(jsonrpc.parse(msg.data), headers=msg.headers or {})
            if request.method == PING:
                reply = Reply({})
            else:
                # A span continuing the caller's trace (headers), current while the
                # method runs and while the work it starts is set going (then).
                spans.enter_context(
                    tracing.consumer_span(
                        request.method, request.headers, **{"rpc.system": "jsonrpc"}
                    )
                )
                reply = await self.dispatch(request)
            body = jsonrpc.result_envelope(request.id, reply.result)
        except RpcError as exc:
            body = jsonrpc.error_envelope(
                request.id if request else jsonrpc.request_id(msg.data), exc
            )
        except TurnkeeperError as exc:
            body = jsonrpc.error_envelope(
                request.id if request else None, RpcError.from_service(exc)
            )
        except Exception as exc:
            log.exception("handling %s failed", request.method if request else "a request")
            body = jsonrpc.error_envelope(
                request.id if request else None,
                RpcError(INTERNAL_ERROR, f"internal error: {type(exc).__name__}: {exc}"),
            )
        silent = reply is not None and reply.silent
        if msg.reply and (request is None or request.wants_reply) and not silent:
            try:
                await msg.respond(body)
            except Exception as exc:
                log.warning("answering %s failed: %s", request.method if request else "?", exc)
        if reply is not None and reply.then is not None:
            try:
                await reply.then()
            except Exception:
                log.exception("the work after %s failed", request.method if request else "?")

    async def stop(self, timeout: float = 5.0) -> None:
        """Stop taking requests, let those in flight answer, close. Safe twice."""
        self.subscribed.clear()
        for task in (self._connecting, self._probing, self._checking):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._connecting = self._probing = self._checking = None
        if self.announcer is not None:
            await self.announcer.stop(self._nc)
        for sub in (self._sub, self._control, self._version, self._replica):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        self._sub = self._control = self._version = self._replica = None
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=timeout)
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._nc.close(), timeout=2)
            self._nc = None
