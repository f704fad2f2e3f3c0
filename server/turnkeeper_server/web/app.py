"""The HTTP side's aiohttp application and lifecycle, in the gRPC server's event loop.

    web = WebServer(settings, operations=..., methods=..., tokens=..., metrics=..., link=...)
    await web.start()        # bound (port 0 works); web.url is where it serves
    await web.stop()         # safe to call twice

Routes: the Connect methods of TurnService (`connect.py`, through the gRPC
servicer's methods as a typed protocol), a turn's events as SSE (`sse.py`, through
the operations beneath both surfaces), the agent relay (`relay.py`), /v1/health and /v1/metrics, and the pages
under /console/ (`static/`). The exposure rule is the gRPC side's own
(`transport.check_exposure`), applied to this address.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, Protocol

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.metrics_core import Metric

from turnkeeper_server.errors import PermissionDenied
from turnkeeper_server.messaging.link import NatsLink
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.operations import Operations
from turnkeeper_server.security import auth, transport
from turnkeeper_server.security.assertions import Assertions
from turnkeeper_server.security.auth import TokenStore
from turnkeeper_server.security.streams import OpenStreams
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web import connect, cross_site, guard, langgraph
from turnkeeper_server.web.connect import error_response
from turnkeeper_server.web.langgraph import custom_auth
from turnkeeper_server.web.langgraph.errors import unmatched_as_json
from turnkeeper_server.web.pump import Pump
from turnkeeper_server.web.relay import AgentRelay
from turnkeeper_server.web.sse import EventStream
from turnkeeper_server.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).resolve().parent / "static"
# The console's files by name: a fixed set, so no path from a request reaches the disk.
STATIC_FILES: Final = {p.name: p for p in STATIC.iterdir() if p.is_file()}
NOT_FOUND_PAGE: Final = """<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>not found · turnkeeper console</title>
<link rel="stylesheet" href="/console/console.css"></head>
<body><main><h2>Not found</h2>
<p>The console has no such page. <a href="/console/">Turns</a> ·
<a href="/console/chat">Chat</a></p></main></body>
</html>
"""

# Only our own files run in the pages; nothing may frame them.
_CSP: Final = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)

# The metric families the console's summary shows (sums over their labels).
SUMMARY_METRICS: Final = (
    "turnkeeper_turns_started",
    "turnkeeper_turns_finished",
    "turnkeeper_redrives",
    "turnkeeper_rewinds",
    "turnkeeper_turns_failed_at_cap",
    "turnkeeper_resumes",
    "turnkeeper_events_appended",
    "turnkeeper_outbox_published",
    "turnkeeper_outbox_publish_failures",
    "turnkeeper_watchers",
    "turnkeeper_turns",
    "turnkeeper_outbox_backlog",
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def _headers(request: web.Request, response: web.StreamResponse) -> None:
    """Security headers on every response, event streams included (set just before
    the headers go out)."""
    response.headers.setdefault("Content-Security-Policy", _CSP)
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    response.headers.setdefault("Referrer-Policy", "no-referrer")
    if request.secure:
        # Served over TLS: the browser keeps to HTTPS for this host (decision 189).
        response.headers.setdefault("Strict-Transport-Security", "max-age=31536000")
    if not request.path.startswith("/console/"):
        response.headers.setdefault("Cache-Control", "no-store")


class WebSettings(transport.TransportSettings, Protocol):
    """What the HTTP side reads of the service's settings (config.Settings)."""

    @property
    def http_listen(self) -> str | None: ...

    @property
    def http_any_port_if_busy(self) -> bool: ...

    @property
    def http_allowed_hosts(self) -> tuple[str, ...]: ...

    @property
    def http_cors_origins(self) -> tuple[str, ...]: ...

    @property
    def http_header_timeout(self) -> float: ...

    @property
    def http_idle_timeout(self) -> float: ...

    @property
    def http_body_timeout(self) -> float: ...

    @property
    def http_max_pending_per_peer(self) -> int: ...

    @property
    def http_max_connections(self) -> int: ...

    @property
    def http_max_connections_per_peer(self) -> int: ...

    @property
    def http_write_timeout(self) -> float: ...

    @property
    def langgraph_auth(self) -> str | None: ...

    @property
    def langgraph_config(self) -> Path | None: ...

    @property
    def langgraph_stream(self) -> str: ...

    @property
    def webhooks(self) -> WebhookSettings: ...

    @property
    def subject_prefix(self) -> str: ...

    @property
    def namespace(self) -> str: ...


def ssl_context(settings: transport.TransportSettings) -> ssl.SSLContext | None:
    """The gRPC side's TLS settings as an ssl context (mutual TLS with a client CA)."""
    transport.check_tls_settings(settings)
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(settings.tls_cert, settings.tls_key)
    if settings.tls_client_ca is not None:
        context.load_verify_locations(settings.tls_client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def metric_summary(families: list[Metric]) -> dict[str, Any]:
    """{family: total, or {label value: total}} for SUMMARY_METRICS."""
    out: dict[str, Any] = {}
    for family in families:
        if family.name not in SUMMARY_METRICS:
            continue
        by_label: dict[str, float] = {}
        total = 0.0
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            total += sample.value
            if sample.labels:
                key = ",".join(str(v) for v in sample.labels.values())
                by_label[key] = by_label.get(key, 0.0) + sample.value
        out[family.name] = by_label or total
    return out


class WebServer:
    def __init__(
        self,
        settings: WebSettings,
        *,
        operations: Operations,
        methods: connect.BrowserMethods,
        tokens: TokenStore | None,
        metrics: Metrics,
        link: NatsLink,
        serving: Callable[[], bool],
        streams: OpenStreams | None = None,
        assertions: Assertions | None = None,
        announced: Callable[[str], bool] = lambda agent: True,
        agents: Callable[[], list[str]] = list,
    ) -> None:
        if settings.http_listen is None:
            raise ValueError("WebServer needs settings.http_listen")
        self.settings = settings
        self.listen = settings.http_listen
        # The same refusal as gRPC's, for this address.
        transport.check_exposure(settings, tokens=tokens is not None, listen=self.listen)
        self.tokens = tokens
        self.metrics = metrics
        self.link = link
        self.serving = serving
        # The agents replicas announced (Turns.announced_agents), for GET /v1/agents.
        self.agents = agents
        self.ssl = ssl_context(settings)
        # Connections that have not sent a request yet: timed and capped per peer.
        self.gate = guard.ConnectionGate(
            header_timeout=settings.http_header_timeout,
            max_pending=settings.http_max_pending_per_peer,
            setting="--http-max-pending-per-peer",
            max_open=settings.http_max_connections,
            max_open_per_peer=settings.http_max_connections_per_peer,
        )
        middlewares: list[Middleware] = [self.gate.middleware]
        if tokens is None and transport.is_loopback(self.listen):
            # DNS rebinding: only this host's names (guard.py, decision 182).
            allowed = guard.allowed_hosts(
                transport.listen_host(self.listen), settings.http_allowed_hosts
            )
            middlewares.append(guard.host_allow_list(allowed))
        # Pages of other sites change nothing (cross_site.py, decision 273); it also
        # refuses --cors-origin '*' without tokens.
        middlewares.append(
            cross_site.CrossSite(settings.http_cors_origins, tokens=tokens is not None).middleware
        )
        # Browser panels of other origins calling the LangGraph API (decision 216).
        cors = langgraph.Cors(settings.http_cors_origins) if settings.http_cors_origins else None
        if cors is not None:
            middlewares.append(cors.middleware)
        # No route, or not this method: {"detail": ...} JSON as LangGraph's server
        # answers, not aiohttp's plain text (SDKs read the detail of every error).
        middlewares.append(unmatched_as_json)
        self.app = web.Application(client_max_size=connect.MAX_BODY_BYTES, middlewares=middlewares)
        self.app[connect.BODY_TIMEOUT] = settings.http_body_timeout
        self.app.on_response_prepare.append(_headers)
        if cors is not None:
            self.app.on_response_prepare.append(cors.on_prepare)
        connect.add_routes(self.app, methods, tokens, metrics)
        # Each caller's open streams, ended when its token is revoked (as WatchTurn's).
        streams = streams if streams is not None else OpenStreams()
        self.events = EventStream(
            operations.turns,
            tokens,
            Pump(operations.turns, streams, write_timeout=settings.http_write_timeout),
        )
        self.app.router.add_get("/v1/turns/{turn_id}/events", self.events.__call__)
        self.relay = AgentRelay(
            link,
            tokens,
            assertions,
            prefix=settings.subject_prefix,
            namespace=settings.namespace,
            announced=announced,
        )
        self.app.router.add_post("/v1/agents/{agent}/rpc", self.relay.__call__)
        # LangGraph's API (web/langgraph/): the assistants are the agents announced.
        self.langgraph = langgraph.Deps(
            engine=operations.engine,
            operations=operations,
            relay=self.relay,
            directory=operations.directory,
            tokens=tokens,
            pump=Pump(operations.turns, streams, write_timeout=settings.http_write_timeout),
            custom_auth=custom_auth.load_setting(
                settings.langgraph_auth, settings.langgraph_config
            ),
            stream=settings.langgraph_stream,
            webhooks=settings.webhooks,
        )
        langgraph.add_routes(self.app, self.langgraph)
        # Every replica fires due crons and runs started later, one per tick.
        self.crons = langgraph.CronScheduler(self.langgraph)
        self.app.router.add_get("/v1/health", self._health)
        self.app.router.add_get("/v1/metrics", self._metrics)
        self.app.router.add_get("/v1/whoami", self._whoami)
        self.app.router.add_get("/v1/agents", self._agents)
        self.app.router.add_get("/", self._to_console)
        self.app.router.add_get("/console/", self._page("index.html"))
        self.app.router.add_get("/console/chat", self._page("chat.html"))
        self.app.router.add_get("/console/agents", self._page("agents.html"))
        self.app.router.add_get("/console/store", self._page("store.html"))
        self.app.router.add_get("/console/{name:.*}", self._static)
        self.runner: web.AppRunner | None = None
        self.listeners: list[asyncio.Server] = []
        self.port = 0
        self._stopped = False

    @property
    def url(self) -> str:
        host = transport.listen_host(self.listen)
        host = f"[{host}]" if ":" in host else host
        scheme = "https" if self.ssl else "http"
        return f"{scheme}://{host}:{self.port}/"

    async def start(self) -> None:
        host = transport.listen_host(self.listen)
        port = int(self.listen.rpartition(":")[2])
        self.runner = web.AppRunner(
            self.app,
            access_log=None,
            shutdown_timeout=1.0,
            # Closes a connection idle between requests (aiohttp's keep-alive timer).
            keepalive_timeout=self.settings.http_idle_timeout,
        )
        await self.runner.setup()
        # Out of descriptors, asyncio would log each failed accept with a traceback.
        guard.quiet_accept_errors(asyncio.get_running_loop())
        try:
            await self._bind(host, port)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or not self.settings.http_any_port_if_busy:
                raise
            log.warning("HTTP port %d is in use: serving the console on another port", port)
            await self._bind(host, 0)
        log.info("console and HTTP API on %s", self.url)
        self.crons.start()

    async def _bind(self, host: str, port: int) -> None:
        assert self.runner is not None and self.runner.server is not None
        # Our own listener rather than web.TCPSite: each connection goes through the
        # gate before aiohttp's protocol sees it.
        listener = await asyncio.get_running_loop().create_server(
            self.gate.factory(self.runner.server),
            host,
            port,
            ssl=self.ssl,
            reuse_address=True,
        )
        self.listeners.append(listener)
        self.port = int(listener.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._stopped or self.runner is None:
            return
        self._stopped = True
        await self.crons.stop()
        for listener in self.listeners:
            listener.close()
        # Open event streams end here; pages reconnect with Last-Event-ID.
        await self.runner.cleanup()

    async def _health(self, request: web.Request) -> web.Response:
        nats = "off" if not self.link.enabled else "up" if self.link.connected else "down"
        return web.json_response(
            {"status": "SERVING" if self.serving() else "NOT_SERVING", "nats": nats}
        )

    async def _metrics(self, request: web.Request) -> web.Response:
        try:
            caller = web_auth.caller_of(request, self.tokens)
            if caller is not None and caller.role not in (auth.OPERATOR, auth.ADMIN):
                raise PermissionDenied(f"{caller} may not read the service's metrics")
        except Exception as exc:
            return error_response(exc)
        return web.json_response(metric_summary(list(self.metrics.registry.collect())))

    async def _whoami(self, request: web.Request) -> web.Response:
        """The caller's role, so a page offers only the actions it may take (the
        service still checks every call); role null: authentication is off."""
        try:
            caller = web_auth.caller_of(request, self.tokens)
        except Exception as exc:
            return error_response(exc)
        if caller is None:
            return web.json_response({"role": None, "name": None, "agent": None})
        return web.json_response({"role": caller.role, "name": caller.name, "agent": caller.agent})

    async def _agents(self, request: web.Request) -> web.Response:
        """The agents replicas announced (the chat page's list); an agent token sees
        its own agent only, as it sees only its own turns."""
        try:
            caller = web_auth.caller_of(request, self.tokens)
        except Exception as exc:
            return error_response(exc)
        names = self.agents()
        if caller is not None and caller.role == auth.AGENT:
            names = [n for n in names if n == caller.agent]
        return web.json_response({"agents": names})

    async def _to_console(self, request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/console/")

    async def _static(self, request: web.Request) -> web.StreamResponse:
        """A file of the console's own, by name; anything else an HTML 404 page (not
        aiohttp's body without a type, which a browser offers to download)."""
        found = STATIC_FILES.get(request.match_info["name"])
        if found is None:
            return web.Response(status=404, text=NOT_FOUND_PAGE, content_type="text/html")
        return web.FileResponse(found)

    @staticmethod
    def _page(name: str) -> Handler:
        async def page(request: web.Request) -> web.StreamResponse:
            return web.FileResponse(STATIC / name)

        return page
