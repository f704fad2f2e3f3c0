"""The :class:`Bridge`: wires the graph, the service, NATS and /healthz together
and owns their lifecycle.

Startup (docs/architecture.md §5, and the contract's order): compile the graph with the
:class:`BoundarySaver`, serve /healthz, start connecting to NATS, wait until the
bridge's own ``GET /healthz`` answers 200 (the service answers and the NATS
subscription is live), and only then call Redrive with this replica's new
incarnation and start every turn it hands back. /healthz never waits for the
re-drive. With NATS down at startup the re-drive waits too: a replica nobody can
reach is not ready, and one that never gets ready (misconfigured, crash-looping)
must not spend its orphans' re-drive attempts; the orphans wait in the journal
and are taken as soon as NATS is back (decision 38).

``GET /healthz`` answers 200 when the bridge can take requests: the graph is
loaded, the service answers this bridge's calls (its TLS settings and token
accepted), and NATS routes the agent's subject to this replica's subscription
(proved by a probe, see :mod:`turnkeeper.agent.bridge._subscriber`); 503 with the reason
otherwise (a refused token, an unreachable service, NATS not subscribed yet or
reconnecting, shutting down). Shutdown: /healthz 503, stop taking requests, let
running turns finish for ``shutdown_grace`` and leave the rest to a re-drive, close.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import signal
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self
from urllib.parse import urlsplit

from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.graph import StateGraph
from langgraph.pregel import Pregel

from turnkeeper import _tracing as tracing
from turnkeeper._graph_versions import canonical
from turnkeeper.agent._fingerprint import GraphVersion
from turnkeeper.agent._store import RemoteStore
from turnkeeper.agent.bridge._announce import Announcer
from turnkeeper.agent.bridge._boundary import BoundarySaver
from turnkeeper.agent.bridge._caller_auth import CallerCheck
from turnkeeper.agent.bridge._config import DEFAULT_HEALTH_LISTEN, BridgeConfig
from turnkeeper.agent.bridge._graph_api import GraphApi, state_values
from turnkeeper.agent.bridge._health import HealthServer, get
from turnkeeper.agent.bridge._methods import Methods
from turnkeeper.agent.bridge._runtime import (
    AnyGraph,
    Assignment,
    Identity,
    InputMapper,
    TurnRuntime,
)
from turnkeeper.agent.bridge._subscriber import NatsSubscriber
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import PermissionDenied, TurnkeeperError, Unauthenticated, Unavailable
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
        self.saver = BoundarySaver(
            options=config.service, serde=serde, share_stream=config.share_stream
        )
        # The service's store (get_store(), runtime.store) unless the graph has one.
        self.store = RemoteStore(config.service)
        if isinstance(graph, StateGraph):
            self.graph: AnyGraph = graph.compile(checkpointer=self.saver, store=self.store)
        elif isinstance(graph, Pregel):
            update: dict[str, Any] = {"checkpointer": self.saver}
            if graph.store is None:
                update["store"] = self.store
            self.graph = graph.copy(update=update)
        else:
            raise TypeError(f"graph must be a StateGraph or a compiled graph, not {type(graph)}")
        # What this replica serves, by shape and label (docs/versions.md): announced,
        # sent with Redrive and ClaimTurn, and stamped on every root checkpoint.
        self.version = GraphVersion.of(self.graph, config.version_label)
        self.saver.stamp_of = lambda checkpoint: self.version.stamp(checkpoint).to_json()
        self.runtime = TurnRuntime(
            self.graph,
            self.client,
            self.saver,
            self.identity,
            input_mapper=input_mapper or _identity,
            run_config=run_config,
            langgraph_api=config.langgraph_api,
            graph_version=self.version_message,
            max_turns=config.max_turns,
        )
        # With a token, the service has tokens: callers prove who they are with a
        # caller assertion the service signed, which this bridge verifies with it.
        token = config.service.bearer_token
        # A bridge with an input mapper takes its own input shape, not the graph's:
        # its schemas say so, for the chat page (decision 324).
        self.graph_api = GraphApi(self.graph, config.agent, input_mapped=input_mapper is not None)
        if config.langgraph_api:
            self.saver.values_of = functools.partial(state_values, self.graph)
            channels = self.graph.stream_channels_asis
            self.saver.values_channels = frozenset(
                [channels] if isinstance(channels, str) else channels
            )
        self.methods = Methods(
            self.client,
            self.runtime,
            self.identity,
            CallerCheck(token, config.agent) if token else None,
            self.graph_api,
        )
        host, port = config.health_address
        self.health = HealthServer(host, port, self._check)
        self.subscriber = NatsSubscriber(
            config.nats_url,
            config.subject,
            config.queue_group,
            self.methods.dispatch,
            name=f"turnkeeper-bridge/{config.agent}/{config.replica}",
            control_subject=config.control_subject,
            version_subject=config.version_subject(self.version.fingerprint),
            replica_subject=config.replica_subject,
            # No NATS credentials given: connect as this agent token's own NATS user.
            auth=config.nats_auth.or_token_identity(config.service.bearer_token),
            # With a token the deployment is secured: NATS must isolate the agents.
            check_isolation=bool(config.service.bearer_token),
            announcer=Announcer(
                config.announce_subject,
                config.discover_subject,
                {
                    "agent": config.agent,
                    "replica": config.replica,
                    "incarnation": config.incarnation,
                    "graph": {
                        "fingerprint": self.version.fingerprint,
                        "label": self.version.label,
                        "shape": self.version.shape,
                    },
                    # Its admission limit, and whether every slot is taken (turns
                    # wait): the service says so of a turn nobody runs yet.
                    "max_turns": config.max_turns,
                    "full": False,
                    # It takes hand-offs that carry their claim, on its own subject:
                    # the service may claim a new turn for it in the start's commit.
                    "claims": config.replica_subject is not None,
                },
            ),
        )
        self.runtime.admission.on_full = self._full
        self._started = False
        self._stopping = False
        self._closed = asyncio.Event()
        self._redriven = asyncio.Event()
        self._shutdown_task: asyncio.Task[None] | None = None

    def _full(self, full: bool) -> None:
        """Every slot taken, or one free again: said to the service at once."""
        announcer = self.subscriber.announcer
        if announcer is not None:
            announcer.update(full=full)

    @property
    def version_message(self) -> turns_pb2.GraphVersion:
        """This replica's graph version as Redrive and ClaimTurn carry it."""
        return turns_pb2.GraphVersion(
            fingerprint=self.version.fingerprint,
            label=self.version.label,
            shape_json=canonical(self.version.shape),
        )

    @property
    def health_url(self) -> str:
        return self.health.url

    # -- health -------------------------------------------------------------------------

    async def _check(self) -> tuple[bool, str]:
        """What GET /healthz answers."""
        if self._stopping:
            return False, "shutting down"
        refusal = await self._service_refusal()
        if refusal is not None:
            return False, self._service_reason(refusal)
        if not self.subscriber.ready:
            where = f"{self.config.subject} on {self.config.nats_url}"
            if self.subscriber.connected:
                return False, f"NATS: the subscription to {where} is not live yet"
            return False, f"NATS: not connected; not subscribed to {where}"
        return True, "ok"

    async def _service_refusal(self) -> TurnkeeperError | None:
        """None when the service answers this bridge's calls."""
        try:
            await self.client.turn_status(
                turns_pb2.TurnStatusRequest(turn_id=_PROBE_TURN_ID), timeout=2.0
            )
        except TurnkeeperError as exc:
            return exc
        return None

    def _service_reason(self, exc: TurnkeeperError) -> str:
        target = self.config.service.target
        if isinstance(exc, (Unauthenticated, PermissionDenied)):
            return (
                f"the turnkeeper service at {target} refused this bridge's credentials "
                f"({exc.code.name}: {exc.message}); check TURNKEEPER_TOKEN (an "
                f"agent:{self.identity.agent} token) and the TLS settings"
            )
        return f"turnkeeper service at {target} unreachable: {exc}"

    async def _wait_until_healthy(self) -> bool:
        """Until this bridge's own ``GET /healthz`` answers 200 (the service may
        start after us, NATS may be away); False when the bridge is shut down first.
        Asked over HTTP, as an orchestrator would: 200 proves the listener too."""
        url = urlsplit(self.health.url)
        host, port = url.hostname or "127.0.0.1", self.health.port
        delay, last_report = 0.05, float("-inf")
        while not self._stopping:
            try:
                code, reason = await get(host, port, timeout=5.0)
            except (OSError, TimeoutError, ValueError, IndexError) as exc:
                code, reason = 0, f"GET {self.health.url} failed: {exc!r}"
            if code == 200:
                return True
            if time.monotonic() - last_report > 5:
                # A refused token will not fix itself: say so as an error.
                refused = isinstance(
                    await self._service_refusal(), (Unauthenticated, PermissionDenied)
                )
                level = logging.ERROR if refused else logging.WARNING
                log.log(level, "startup Redrive waits for /healthz 200: %s", reason.strip())
                last_report = time.monotonic()
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
        return False

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Serve /healthz, subscribe, and once /healthz answers 200 re-drive this
        replica's orphans. Returns once the startup Redrive is done, or when the
        bridge is shut down while it waits for the service or NATS."""
        if self._started:
            return
        self._started = True
        # Traces only when the OTEL_* variables ask for them (turnkeeper._tracing).
        tracing.configure_from_env(f"turnkeeper-bridge/{self.config.agent}")
        try:
            await self._serve_health()
            log.info(
                "agent %s replica %s incarnation %s: /healthz on %s",
                self.identity.agent,
                self.identity.replica,
                self.identity.incarnation,
                self.health.url,
            )
            await self.subscriber.start()
            if not await self._wait_until_healthy() or self._stopping:
                return
            await self._redrive()
            self._redriven.set()
        except BaseException:
            await self.shutdown(0)
            raise

    async def _serve_health(self) -> None:
        """/healthz where the config says; the default port moves to a free one when
        another process holds it (two agents on one machine), a port given does not."""
        try:
            await self.health.start()
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            listen = self.config.health_listen
            if listen != DEFAULT_HEALTH_LISTEN:
                raise ValueError(
                    f"/healthz cannot listen on {listen}: the port is in use. Set "
                    "TURNKEEPER_HEALTH_LISTEN to a free HOST:PORT (port 0: any free one)"
                ) from None
            self.health.port = 0
            await self.health.start()
            log.warning(
                "/healthz: port %s is in use (another agent?): listening on %s instead "
                "(TURNKEEPER_HEALTH_LISTEN=HOST:PORT to choose)",
                listen.rpartition(":")[2],
                self.health.url,
            )

    async def _redrive(self) -> None:
        request = turns_pb2.RedriveRequest(
            agent=self.identity.agent,
            replica=self.identity.replica,
            incarnation=self.identity.incarnation,
            graph=self.version_message,
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
                    "turn_id=%s: FAILED at the re-drive cap after %d re-drives; not run again",
                    turn.turn_id,
                    turn.crashes_charged,
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
        """Until the startup Redrive is done and the NATS subscription is live (a
        probe came back through it); start() does not wait for the subscription."""
        await self._redriven.wait()
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
                await self.store.aclose()
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
