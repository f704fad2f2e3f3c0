"""The :class:`Bridge`: wires the graph, the service, NATS and /healthz together
and owns their lifecycle.

Startup (DESIGN.md §5): compile the graph with the :class:`BoundarySaver`, serve
/healthz, wait until it answers 200 (graph loaded, service reachable), call
Redrive with this replica's new incarnation and start every turn it hands back,
then subscribe to NATS. Shutdown: /healthz 503, stop taking requests, let running
turns finish for ``shutdown_grace`` and leave the rest to a re-drive, close.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from turnkeeper.bridge.boundary import BoundarySaver
from turnkeeper.bridge.config import BridgeConfig
from turnkeeper.bridge.health import HealthServer, get_status
from turnkeeper.bridge.methods import Methods
from turnkeeper.bridge.runtime import AnyGraph, Assignment, Identity, InputMapper, TurnRuntime
from turnkeeper.bridge.subscriber import NatsSubscriber
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import TurnkeeperError, Unavailable
from turnkeeper.v1 import turns_pb2

log = logging.getLogger(__name__)

# TurnStatus of an id no turn has: answered (UNKNOWN) by a service that is up.
_PROBE_TURN_ID = "turnkeeper-bridge-healthz"


def _identity(value: Any) -> Any:
    return value


class Bridge:
    """Hosts one compiled LangGraph graph as a turnkeeper agent.

    ``graph`` is a ``StateGraph`` (compiled here) or a compiled graph (copied with
    the bridge's checkpointer in place of its own). ``input_mapper`` turns the
    JSON ``input`` of ``responses/create`` into the graph's input (identity by
    default); it also runs on the journaled input when a turn restarts from
    scratch. ``run_config`` is merged into every run's config (``recursion_limit``,
    extra ``callbacks`` or ``configurable`` keys ...).

    ::

        async with Bridge(builder, BridgeConfig.from_env("my-agent")) as bridge:
            await bridge.wait_closed()      # or: await Bridge(...).run()
    """

    def __init__(
        self,
        graph: StateGraph[Any, Any, Any, Any] | AnyGraph,
        config: BridgeConfig,
        *,
        input_mapper: InputMapper | None = None,
        run_config: Mapping[str, Any] | None = None,
        serde: SerializerProtocol | None = None,
    ) -> None:
        self.config = config
        self.identity = Identity(config.agent, config.replica, config.incarnation)
        self.client = AsyncTurnkeeperClient(config.service)
        self.saver = BoundarySaver(options=config.service, serde=serde)
        if isinstance(graph, StateGraph):
            self.graph: AnyGraph = graph.compile(checkpointer=self.saver)
        elif isinstance(graph, Pregel):
            self.graph = graph.copy(update={"checkpointer": self.saver})
        else:
            raise TypeError(f"graph must be a StateGraph or a compiled graph, not {type(graph)}")
        self.runtime = TurnRuntime(
            self.graph,
            self.client,
            self.saver,
            self.identity,
            input_mapper=input_mapper or _identity,
            run_config=run_config,
        )
        self.methods = Methods(self.client, self.runtime, self.identity)
        host, port = config.health_address
        self.health = HealthServer(host, port, self._check)
        self.subscriber = NatsSubscriber(
            config.nats_url,
            config.subject,
            config.queue_group,
            self.methods.dispatch,
            name=f"turnkeeper-bridge/{config.agent}/{config.replica}",
        )
        self._started = False
        self._stopping = False
        self._closed = asyncio.Event()
        self._shutdown_task: asyncio.Task[None] | None = None

    @property
    def health_url(self) -> str:
        return self.health.url

    # -- health -------------------------------------------------------------------------

    async def _check(self) -> tuple[bool, str]:
        if self._stopping:
            return False, "shutting down"
        try:
            await self.client.turn_status(
                turns_pb2.TurnStatusRequest(turn_id=_PROBE_TURN_ID), timeout=2.0
            )
        except TurnkeeperError as exc:
            return False, f"turnkeeper service at {self.config.service.target} unreachable: {exc}"
        return True, "ok"

    async def _wait_healthy(self) -> None:
        """Until our own GET /healthz says 200 (the service may start after us)."""
        host = "127.0.0.1" if self.health.host in ("0.0.0.0", "") else self.health.host
        host = "::1" if host == "::" else host
        delay, last_warning = 0.05, time.monotonic()
        while True:
            try:
                status = await get_status(host, self.health.port)
            except (OSError, TimeoutError, ValueError, IndexError) as exc:
                status, detail = 0, str(exc)
            else:
                detail = f"HTTP {status}"
            if status == 200:
                return
            if time.monotonic() - last_warning > 5:
                reason = (await self._check())[1] if status == 503 else detail
                log.warning("waiting for /healthz to answer 200: %s", reason)
                last_warning = time.monotonic()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Serve /healthz, re-drive this replica's orphans, subscribe. Returns once
        the bridge is serving (NATS may still be connecting: turns go on over gRPC)."""
        if self._started:
            return
        self._started = True
        try:
            await self.health.start()
            log.info(
                "agent %s replica %s incarnation %s: /healthz on %s",
                self.identity.agent,
                self.identity.replica,
                self.identity.incarnation,
                self.health.url,
            )
            await self._wait_healthy()
            await self._redrive()
            await self.subscriber.start()
        except BaseException:
            await self.shutdown(0)
            raise

    async def _redrive(self) -> None:
        request = turns_pb2.RedriveRequest(
            agent=self.identity.agent,
            replica=self.identity.replica,
            incarnation=self.identity.incarnation,
        )
        delay = 0.2
        while True:
            try:
                response = await self.client.redrive(request)
                break
            except Unavailable as exc:
                # Not retried by the client (a compare-and-set). Trying again is safe
                # here: turns it already moved to this incarnation are not moved
                # again, and any it returned in a lost answer come back by lease expiry.
                log.warning("Redrive failed (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        for redriven in response.turns:
            turn = redriven.turn
            if redriven.failed_at_cap:
                log.warning(
                    "turn_id=%s: FAILED at the re-drive cap (attempts %d); not run again",
                    turn.turn_id,
                    turn.attempts,
                )
                continue
            self.runtime.start(Assignment(turn, redriven.checkpoint_id, "startup redrive"))
        log.info("startup Redrive: %d turn(s) taken over", len(response.turns))

    async def run(self) -> None:
        """Start, then serve until :meth:`shutdown` (SIGTERM and SIGINT call it when
        this runs in the main thread)."""
        loop = asyncio.get_running_loop()
        handled: list[signal.Signals] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
                handled.append(sig)
        try:
            await self.start()
            await self._closed.wait()
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
            await self.shutdown()

    def _on_signal(self, sig: signal.Signals) -> None:
        log.info("%s received: shutting down", sig.name)
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.create_task(self._shutdown(None))

    async def wait_subscribed(self) -> None:
        """Until the NATS subscription is made (start() does not wait for it)."""
        await self.subscriber.subscribed.wait()

    async def wait_closed(self) -> None:
        await self._closed.wait()

    async def shutdown(self, grace: float | None = None) -> None:
        """Stop in order; safe to call twice (and concurrently)."""
        if self._shutdown_task is None:
            self._shutdown_task = asyncio.create_task(self._shutdown(grace))
        await asyncio.shield(self._shutdown_task)

    async def _shutdown(self, grace: float | None) -> None:
        grace = self.config.shutdown_grace if grace is None else grace
        self._stopping = True
        self.methods.accepting = False
        try:
            await self.subscriber.stop()
            await self.runtime.stop(grace)
        finally:
            with contextlib.suppress(Exception):
                await self.saver.aclose()
            with contextlib.suppress(Exception):
                await self.client.close()
            await self.health.stop()
            self._closed.set()
            log.info("bridge stopped")

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()
