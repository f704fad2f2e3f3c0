"""Wires the service together and owns its lifecycle.

    server = await create_server(settings)   # bound (port 0 works) and serving
    ...
    await server.stop()                      # safe to call twice

Shutdown order: health NOT_SERVING, stop accepting and drain in-flight RPCs,
stop the reaper, flush the outbox to NATS, close NATS, close the databases.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from prometheus_client import start_http_server
from turnkeeper import _tracing as tracing
from turnkeeper.v1 import (
    checkpoints_pb2,
    checkpoints_pb2_grpc,
    operations_pb2,
    operations_pb2_grpc,
    store_pb2,
    store_pb2_grpc,
    turns_pb2,
    turns_pb2_grpc,
)

from turnkeeper_server.audit import OK, TOKENS_RELOAD, AuditLog
from turnkeeper_server.config import Settings
from turnkeeper_server.engine import Engine, TurnNotifier
from turnkeeper_server.engine.store_index import index_of_config
from turnkeeper_server.engine.store_items import ttl_of_config
from turnkeeper_server.messaging.jetstream import StreamSpec, ensure_stream
from turnkeeper_server.messaging.link import NatsLink
from turnkeeper_server.messaging.outbox import OutboxPublisher
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.operations import Operations
from turnkeeper_server.reaper import LeaseReaper
from turnkeeper_server.records import Policy
from turnkeeper_server.retention import RetentionSweeper
from turnkeeper_server.rpc.checkpoint_stream import StreamingCheckpointServicer
from turnkeeper_server.rpc.interceptors import ErrorsAndMetrics
from turnkeeper_server.rpc.operations_service import OperationsServicer
from turnkeeper_server.rpc.store_service import StoreServicer
from turnkeeper_server.rpc.turn_service import TurnServicer
from turnkeeper_server.security import transport
from turnkeeper_server.security.assertions import Assertions
from turnkeeper_server.security.auth import TokenStore
from turnkeeper_server.security.authenticate import Authenticate
from turnkeeper_server.security.streams import OpenStreams
from turnkeeper_server.security.token_reload import Reload, TokenReloader
from turnkeeper_server.store import open_store
from turnkeeper_server.web.app import WebServer
from turnkeeper_server.web.langgraph.webhooks import payload as webhook_payload
from turnkeeper_server.webhooks.delivery import WebhookDeliverer

log = logging.getLogger(__name__)

SERVICE_NAMES = (
    turns_pb2.DESCRIPTOR.services_by_name["TurnService"].full_name,
    checkpoints_pb2.DESCRIPTOR.services_by_name["CheckpointService"].full_name,
    operations_pb2.DESCRIPTOR.services_by_name["OperationsService"].full_name,
    store_pb2.DESCRIPTOR.services_by_name["StoreService"].full_name,
)
# The gRPC health entry that follows the NATS link (decision 322): SERVING while it is
# connected, NOT_SERVING while it is not; absent when NATS is off. `turnkeeper health`
# checks it besides the overall status.
NATS_HEALTH_NAME = "turnkeeper.nats"


class TurnkeeperServer:
    def __init__(self, settings: Settings) -> None:
        # Security first: a server that would be exposed refuses before touching data.
        self.tokens = TokenStore.load(settings.tokens_file) if settings.tokens_file else None
        transport.check_exposure(settings, tokens=self.tokens is not None)
        if settings.metrics_listen:
            transport.check_plain_exposure(
                settings, settings.metrics_listen, "Prometheus metrics", "--metrics-listen"
            )
        self.streams = OpenStreams()
        self.token_reloader = (
            TokenReloader(
                settings.tokens_file,
                self.tokens,
                self.streams,
                poll_seconds=settings.tokens_poll_seconds,
            )
            if settings.tokens_file is not None and self.tokens is not None
            else None
        )
        self.credentials = transport.server_credentials(settings)
        self.settings = settings
        self.metrics = (
            Metrics(database_url=settings.database_url)
            if settings.database_url
            else Metrics(settings.turns_path, settings.sessions_path)
        )
        self.db = open_store(
            database_url=settings.database_url or "",
            turns_path=settings.turns_path,
            sessions_path=settings.sessions_path,
            synchronous=settings.synchronous,
            status_cache_turns=settings.status_cache_turns,
        )
        self.link = NatsLink(
            settings.nats_url, auth=settings.nats_auth, prepare=_jetstream(settings)
        )
        self.link.on_connect.append(lambda _nc: self._nats_health(up=True))
        self.link.on_lost.append(lambda: self._nats_health(up=False))
        self.outbox = OutboxPublisher(self.db, self.link, metrics=self.metrics)
        self.notifier = TurnNotifier()
        self.policy = Policy(
            subject_prefix=settings.subject_prefix,
            lease_seconds=settings.lease_seconds,
            claim_seconds=settings.claim_seconds,
            max_redrives=settings.max_redrives,
            max_run_seconds=settings.max_run_seconds,
            park_expiry_seconds=settings.park_expiry_seconds,
        )
        self.engine = Engine(
            self.db,
            self.policy,
            self.notifier,
            self.outbox,
            self.link,
            self.metrics,
            namespace=settings.namespace,
            version_policies=settings.version_policies,
            store_ttl=ttl_of_config(settings.langgraph_config),
            store_index=index_of_config(settings.langgraph_config),
        )
        self.reaper = LeaseReaper(
            self.engine.turns.reap, settings.reap_interval, settings.lease_seconds
        )
        self.retention = RetentionSweeper(
            self.db,
            self.policy,
            settings.retention_seconds,
            settings.retention_interval,
            turn_retention=settings.turn_retention_seconds,
        )
        self.audit = AuditLog(self.db)
        if self.token_reloader is not None:
            self.token_reloader.on_reload = self._audit_reload
        # Called after each reload that took a changed tokens file (the bundled
        # nats-server's users follow it: main.py).
        self.on_tokens_reloaded: list[Callable[[Reload], None]] = []
        self.assertions = Assertions(self.tokens) if self.tokens is not None else None
        # The operations beneath both surfaces: one instance, so gRPC's WatchTurn and
        # the HTTP side's event streams count against one quota.
        self.operations = Operations(
            self.engine,
            settings.limits,
            self.audit,
            self.assertions,
            owners_edit_state=settings.owners_edit_state,
        )
        self.turn_servicer = TurnServicer(
            self.engine, settings.limits, self.audit, self.assertions, self.operations.turns
        )
        self.web: WebServer | None = None
        if settings.http_listen is not None:
            self.web = WebServer(
                settings,
                operations=self.operations,
                # Connect: TurnService over HTTP, through the servicer's own methods.
                methods=self.turn_servicer,
                tokens=self.tokens,
                metrics=self.metrics,
                link=self.link,
                serving=lambda: not self._stopped,
                # A revoked token's SSE streams end as its WatchTurn streams do.
                streams=self.streams,
                assertions=self.assertions,
                # The relay says when an agent nobody hears was never announced.
                announced=self.engine.turns.announced,
                agents=self.engine.turns.announced_agents,
            )
        # Runs' webhooks come with the LangGraph API, and are built by it (their body
        # is a run's): delivered from the journal's rows by every replica.
        self.webhooks = (
            WebhookDeliverer(
                self.db,
                settings.webhooks,
                webhook_payload(self.web.langgraph),
                metrics=self.metrics,
            )
            if self.web is not None
            else None
        )
        self.health = health.aio.HealthServicer()  # type: ignore[attr-defined]  # not in grpc-stubs
        self.server: aio.Server | None = None
        self.port = 0
        self.metrics_port = 0
        self._metrics_http: object | None = None
        self._db_open = False
        self._stopped = False
        self._stop_lock = asyncio.Lock()

    @property
    def address(self) -> str:
        host = self.settings.listen.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    async def start(self) -> None:
        tokens, credentials = self.tokens, self.credentials
        self.db.open()
        self._db_open = True
        self.db.listen(self.notifier.changed)
        await self.engine.store.prepare()
        # ErrorsAndMetrics is outermost: authentication refusals are mapped and counted.
        interceptors: list[Any] = [ErrorsAndMetrics(self.metrics)]
        if tracing.active():
            # Imported only then: with tracing off nothing of OpenTelemetry is loaded.
            from turnkeeper_server.tracing import ServerTracing

            interceptors.insert(0, ServerTracing())
            # Outbox rows keep their writer's trace context for the NATS headers.
            self.db.traced = True
        if tokens is not None:
            interceptors.append(Authenticate(tokens, self.streams))
        message_bytes = self.settings.limits.max_message_bytes
        server = aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", message_bytes),
                ("grpc.max_send_message_length", message_bytes),
                *connection_options(self.settings),
            ],
        )
        turns_pb2_grpc.add_TurnServiceServicer_to_server(self.turn_servicer, server)
        checkpoints_pb2_grpc.add_CheckpointServiceServicer_to_server(
            StreamingCheckpointServicer(
                self.engine,
                self.settings.limits,
                self.metrics,
                self.turn_servicer,
                self.audit,
                self.operations.threads,
            ),
            server,
        )
        operations_pb2_grpc.add_OperationsServiceServicer_to_server(
            OperationsServicer(tokens, self.audit, self.assertions), server
        )
        store_pb2_grpc.add_StoreServiceServicer_to_server(
            StoreServicer(self.engine, self.settings.limits), server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        if self.settings.reflection:
            reflection.enable_server_reflection(
                (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
            )
        if credentials is None:
            self.port = server.add_insecure_port(self.settings.listen)
        else:
            self.port = server.add_secure_port(self.settings.listen, credentials)
        if self.port == 0:
            raise RuntimeError(f"could not listen on {self.settings.listen}")
        self.server = server
        await self.link.start()
        await self.outbox.start()
        await self.reaper.start()
        await self.retention.start()
        if self.webhooks is not None:
            await self.webhooks.start()
        if self.token_reloader is not None:
            await self.token_reloader.start()
        await server.start()
        if self.web is not None:
            await self.web.start()
        if self.settings.metrics_listen:
            host, _, port = self.settings.metrics_listen.rpartition(":")
            http, _thread = start_http_server(
                int(port), addr=host or "0.0.0.0", registry=self.metrics.registry
            )
            self._metrics_http = http
            self.metrics_port = http.server_port
            log.info("metrics on http://%s:%d/metrics", host or "0.0.0.0", self.metrics_port)
        for name in ("", *SERVICE_NAMES):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        if self.link.enabled:
            await self._nats_health(up=self.link.connected)
        log.info(
            "turnkeeper serving on %s (%s, %s; %s, NATS %s)",
            self.address,
            ("mutual TLS" if self.settings.tls_client_ca else "TLS")
            if credentials
            else "plaintext",
            f"{len(tokens)} tokens" if tokens else "no authentication",
            self.db.describe(),
            self.settings.nats_url or "off",
        )

    async def _nats_health(self, *, up: bool) -> None:
        serving = health_pb2.HealthCheckResponse.SERVING
        await self.health.set(
            NATS_HEALTH_NAME, serving if up else health_pb2.HealthCheckResponse.NOT_SERVING
        )

    async def stop(self, grace: float | None = None) -> None:
        """Stop in order; safe to call twice and from a signal handler.

        Bounded (decision 319): the whole stop takes at most `shutdown_timeout`
        seconds, whatever is down. Each step gets what is left of it, and a step
        that fails or runs out of time (PostgreSQL stopped, NATS gone) is logged
        and the next one runs: what was acknowledged is committed already, and an
        outbox row not published stays stored for the next start."""
        async with self._stop_lock:
            if self._stopped:
                return
            self._stopped = True
            loop = asyncio.get_running_loop()
            end = loop.time() + self.settings.shutdown_timeout
            grace = self.settings.shutdown_grace if grace is None else grace
            # In-flight RPCs get at most half the deadline: the rest is for the
            # outbox, NATS and the stores.
            grace = min(grace, self.settings.shutdown_timeout / 2)

            async def step(name: str, work: Callable[[], Awaitable[object]]) -> object:
                left = end - loop.time()
                try:
                    return await asyncio.wait_for(work(), max(left, 0.01))
                except TimeoutError:
                    log.warning("shutdown: %s did not finish in time; going on", name)
                except Exception as exc:
                    log.warning("shutdown: %s failed (%s); going on", name, exc)
                return None

            # Probes see NOT_SERVING first, so load balancers stop sending work.
            await step("health", self.health.enter_graceful_shutdown)
            if self.token_reloader is not None:
                await step("tokens reloader", self.token_reloader.stop)
            if self.web is not None:
                await step("HTTP side", self.web.stop)
            server = self.server
            if server is not None:
                await step("gRPC drain", lambda: server.stop(grace))
            await step("reaper", self.reaper.stop)
            await step("retention", self.retention.stop)
            if self.webhooks is not None:
                await step("webhooks", self.webhooks.stop)
            await step("hand-offs", self.engine.stop)
            await step("outbox publisher", self.outbox.stop)
            # A start that failed opening the store (another service holds it, the
            # database is unreachable) has nothing to flush.
            if self._db_open:
                left = await step(
                    "outbox flush", lambda: self.outbox.flush(timeout=max(0.0, end - loop.time()))
                )
                if left:
                    log.warning("%d outbox messages stay stored for the next start", left)
            await step("NATS", self.link.stop)
            await step("audit", self.audit.flush)
            if self._metrics_http is not None:
                self._metrics_http.shutdown()  # type: ignore[attr-defined]
            try:
                self.db.close()
            except Exception as exc:
                log.warning("shutdown: closing the store failed (%s)", exc)
            log.info("turnkeeper stopped")

    def _audit_reload(self, reload: Reload) -> None:
        if not reload.error:
            for hook in self.on_tokens_reloaded:
                hook(reload)
        self.audit.record_soon(
            TOKENS_RELOAD,
            str(self.settings.tokens_file),
            (reload.error and "INVALID_ARGUMENT") or OK,
            reload.describe(),
            f"service ({reload.trigger})",
        )

    def reload_tokens(self, trigger: str = "SIGHUP") -> None:
        """Read the tokens file again (SIGHUP); nothing without one."""
        if self.token_reloader is not None:
            self.token_reloader.reload(trigger)

    async def wait_for_termination(self) -> None:
        if self.server is not None:
            await self.server.wait_for_termination()


async def create_server(settings: Settings) -> TurnkeeperServer:
    server = TurnkeeperServer(settings)
    try:
        await server.start()
    except BaseException:
        await server.stop(0)
        raise
    return server


def connection_options(settings: Settings) -> list[tuple[str, int]]:
    """gRPC core's limits on connections (decision 181): a connection without an RPC
    is sent GOAWAY after the idle timeout; a new one must finish its handshakes (TLS,
    then HTTP/2's SETTINGS) within the handshake timeout; a peer that pings more
    often than every 10 s without data is disconnected after 2 strikes; the server
    pings a connection quiet for 2 minutes (open streams included) and closes it when
    no answer comes within 20 s, so a vanished peer does not hold a stream."""
    return [
        # Connections in all: past it gRPC core closes a new one at accept, so a flood
        # holds a bounded number of descriptors (decision 274).
        ("grpc.max_allowed_incoming_connections", settings.grpc_max_connections),
        ("grpc.max_concurrent_streams", settings.grpc_max_streams_per_connection),
        ("grpc.max_connection_idle_ms", int(settings.grpc_idle_timeout * 1000)),
        ("grpc.server_handshake_timeout_ms", int(settings.grpc_handshake_timeout * 1000)),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.keepalive_time_ms", 120_000),
        ("grpc.keepalive_timeout_ms", 20_000),
    ]


def _jetstream(settings: Settings) -> Any:
    """The link's preparation of each NATS connection: the stream, when asked for."""
    if not settings.jetstream:
        return None
    spec = StreamSpec(settings.subject_prefix, settings.jetstream_duplicate_window)

    async def prepare(nc: Any) -> None:
        await ensure_stream(nc, spec)

    return prepare
