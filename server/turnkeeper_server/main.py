"""`turnkeeper serve`: flags and env to Settings, signals to a graceful stop.

The client's CLI finds this module through the `turnkeeper.commands` entry point
group (server/pyproject.toml) and calls `add_arguments` and `run`; `turnkeeper-server`
and `python -m turnkeeper_server` call `main`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import gc
import logging
import os
import resource
import signal
import threading
from pathlib import Path

from turnkeeper import _io_engine as io_engine
from turnkeeper import _local_services as local_services
from turnkeeper import _nats_auth as nats_auth
from turnkeeper import _tracing as tracing
from turnkeeper._nats_auth import NatsAuth
from turnkeeper._nats_identity import NatsIdentity

from turnkeeper_server import logs
from turnkeeper_server.app import create_server
from turnkeeper_server.config import Settings, resolve_paths
from turnkeeper_server.durations import add_lifecycle_arguments, parse_duration
from turnkeeper_server.errors import Unavailable
from turnkeeper_server.journal import versions
from turnkeeper_server.journal.versions import VersionPolicies
from turnkeeper_server.limits import DEFAULT_LIMITS
from turnkeeper_server.messaging.credentials import write_config
from turnkeeper_server.messaging.embedded import EmbeddedNats
from turnkeeper_server.security.auth import TokenStore
from turnkeeper_server.security.transport import InsecureListen
from turnkeeper_server.store.lockfile import StoreInUse
from turnkeeper_server.store.status_cache import CACHED_TURNS
from turnkeeper_server.webhooks.settings import WebhookSettings

log = logging.getLogger("turnkeeper")

# What `turnkeeper --help` says about the command this module provides.
HELP = "run the turnkeeper gRPC service"


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    # The defaults are Settings' own, said once there (decision 195).
    defaults = Settings(turns_path=Path("turns.db"), sessions_path=Path("sessions.db"))
    parser.add_argument(
        "--listen",
        default=env("TURNKEEPER_LISTEN", defaults.listen),
        help="gRPC listen address (env TURNKEEPER_LISTEN)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="directory for turns.db and sessions.db; wins over VYSTAK_TURNS_PATH and "
        "VYSTAK_SESSIONS_PATH, which win over TURNKEEPER_DATA_DIR (default /data, "
        "when writable; else the temp dir, with a warning)",
    )
    parser.add_argument(
        "--database-url",
        default=env("TURNKEEPER_DATABASE_URL") or None,
        help="postgresql://... : keep journal and checkpoints in PostgreSQL, so several "
        "replicas can serve one database (env TURNKEEPER_DATABASE_URL); default: SQLite "
        "files (--data-dir)",
    )
    parser.add_argument(
        "--nats-url",
        default=env("TURNKEEPER_NATS_URL") or env("NATS_URL"),
        help="NATS server URL (env TURNKEEPER_NATS_URL or NATS_URL); "
        "without one a bundled nats-server is started (refused with --database-url: "
        "replicas of one database share one NATS)",
    )
    parser.add_argument(
        "--no-nats", action="store_true", help="run without NATS: no mirroring, no hand-offs"
    )
    nats_auth.add_arguments(parser)
    parser.add_argument(
        "--subject-prefix",
        default=env("TURNKEEPER_SUBJECT_PREFI", defaults.subject_prefix),
        help="NATS subject prefix (env TURNKEEPER_SUBJECT_PREFIX)",
    )
    parser.add_argument(
        "--namespace",
        default=env("TURNKEEPER_NAMESPACE", defaults.namespace),
        help="agent subject namespace (env TURNKEEPER_NAMESPACE)",
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=float(env("TURNKEEPER_LEASE_SECONDS", str(defaults.lease_seconds))),
        help="executor lease without a heartbeat (env TURNKEEPER_LEASE_SECONDS)",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=parse_duration,
        default=parse_duration(v)
        if (v := env("TURNKEEPER_SHUTDOWN_TIMEOUT"))
        else defaults.shutdown_timeout,
        metavar="DURATION",
        help="longest a stop may take after SIGTERM or SIGINT, whatever is down "
        "(database, NATS) or attached (agents, streams); past it the process exits at "
        "once, and a second signal ends it at once (env TURNKEEPER_SHUTDOWN_TIMEOUT; "
        f"default {defaults.shutdown_timeout:g} s)",
    )
    parser.add_argument(
        "--max-redrives",
        type=int,
        default=defaults.max_redrives,
        help="re-drives before an orphaned turn is FAILED (default %(default)s)",
    )
    parser.add_argument(
        "--version-policy",
        dest="version_policies",
        action="append",
        default=[p for p in env("TURNKEEPER_VERSION_POLICIES", "").split(",") if p.strip()],
        metavar="AGENT=POLICY",
        help="which replicas may continue a turn of AGENT whose graph changed: pin (only "
        "its own graph version), compatible (a version that can continue its checkpoint) "
        "or latest (any); repeatable (env TURNKEEPER_VERSION_POLICIES, comma-separated; "
        "docs/versions.md)",
    )
    parser.add_argument(
        "--default-version-policy",
        choices=versions.POLICIES,
        default=env("TURNKEEPER_DEFAULT_VERSION_POLICY", versions.DEFAULT_POLICY),
        help="the version policy of agents --version-policy does not name (env "
        "TURNKEEPER_DEFAULT_VERSION_POLICY; default %(default)s)",
    )
    parser.add_argument(
        "--status-cache-turns",
        type=int,
        default=CACHED_TURNS,
        help="SQLite: turns whose TurnStatus is kept in memory, exact (decision 148); 0: none",
    )
    add_lifecycle_arguments(
        parser, max_run_time=defaults.max_run_seconds, park_expiry=defaults.park_expiry_seconds
    )
    add_security_arguments(parser)
    parser.add_argument(
        "--http-port",
        type=int,
        default=None,
        help=f"port of the console and HTTP API, on the --listen host; 0: any free port; "
        f"-1: no HTTP (env TURNKEEPER_HTTP_PORT; default {DEFAULT_HTTP_PORT}, or a free "
        "port when that one is taken)",
    )
    parser.add_argument(
        "--allow-host",
        dest="allowed_hosts",
        action="append",
        default=[h for h in env("TURNKEEPER_ALLOWED_HOSTS", "").split(",") if h.strip()],
        help="a Host name the HTTP side answers to besides localhost, 127.0.0.1 and "
        "[::1] while it listens on loopback without tokens (DNS rebinding); repeatable "
        "(env TURNKEEPER_ALLOWED_HOSTS, comma-separated)",
    )
    parser.add_argument(
        "--cors-origin",
        dest="cors_origins",
        action="append",
        default=[o for o in env("TURNKEEPER_CORS_ORIGINS", "").split(",") if o.strip()],
        help="an origin (scheme://host:port) whose browser pages may call the LangGraph "
        "API, as a panel served elsewhere does; '*' for any; repeatable (env "
        "TURNKEEPER_CORS_ORIGINS, comma-separated; default: none)",
    )
    parser.add_argument(
        "--langgraph-stream",
        choices=("live", "settled"),
        default=env("TURNKEEPER_LANGGRAPH_STREAM") or "live",
        help="how LangGraph streams send a model's tokens: 'live', as the model produces "
        "them (a re-drive's rewind takes back what it undid, with `values` and `remove` "
        "parts), or 'settled', once their step's checkpoint is durable; a stream may "
        "ask for the other with the X-Turnkeeper-Stream header (env "
        "TURNKEEPER_LANGGRAPH_STREAM; default: live)",
    )
    parser.add_argument(
        "--langgraph-auth",
        default=env("TURNKEEPER_LANGGRAPH_AUTH") or None,
        metavar="PATH:ATTR",
        help="a langgraph_sdk.Auth ('./auth.py:auth' or 'module:auth') whose "
        "authenticate and @auth.on handlers decide the LangGraph API's end users, as "
        "on LangGraph's server (env TURNKEEPER_LANGGRAPH_AUTH)",
    )
    parser.add_argument(
        "--langgraph-config",
        type=Path,
        default=Path(v) if (v := env("TURNKEEPER_LANGGRAPH_CONFIG")) else None,
        metavar="LANGGRAPH_JSON",
        help="a langgraph.json whose auth.path names the Auth object (relative to its "
        "folder, never outside it); --langgraph-auth wins (env "
        "TURNKEEPER_LANGGRAPH_CONFIG)",
    )
    parser.add_argument(
        "--owners-edit-state",
        action="store_true",
        default=_flag(env("TURNKEEPER_OWNERS_EDIT_STATE")),
        help="let a thread's owner (the token, or the langgraph.json auth's end user, "
        "that made it) edit its state: update_state, a Command's update or goto, a "
        "fork; default: only operators and admins (env TURNKEEPER_OWNERS_EDIT_STATE)",
    )
    add_connection_arguments(parser)
    parser.add_argument(
        "--jetstream",
        action="store_true",
        default=_flag(env("TURNKEEPER_JETSTREAM")),
        help="keep a JetStream stream over <prefix>.turn.> with a duplicate window, so "
        "a message the outbox publishes twice is stored once and a late subscriber "
        "can replay a turn (env TURNKEEPER_JETSTREAM=1; NATS must run with -js)",
    )
    parser.add_argument(
        "--jetstream-duplicate-window",
        type=float,
        default=float(env("TURNKEEPER_JETSTREAM_DUPLICATE_WINDOW", "300")),
        help="seconds within which JetStream drops a repeated outbox message "
        "(env TURNKEEPER_JETSTREAM_DUPLICATE_WINDOW)",
    )
    parser.add_argument(
        "--metrics-listen",
        default=env("TURNKEEPER_METRICS_LISTEN"),
        help="Prometheus endpoint HOST:PORT (env TURNKEEPER_METRICS_LISTEN)",
    )
    parser.add_argument("--log-level", default=env("TURNKEEPER_LOG_LEVEL", "INFO"))
    parser.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default=env("TURNKEEPER_LOG_FORMAT", "text"),
        help="text, or json: one object per line with turn_id and attempt as fields "
        "(env TURNKEEPER_LOG_FORMAT)",
    )


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    """Timeouts and caps on connections before any request (decision 181)."""
    env = os.environ.get
    defaults = Settings(turns_path=Path("turns.db"), sessions_path=Path("sessions.db"))

    def duration(flag: str, name: str, help: str) -> None:
        variable = "TURNKEEPER_" + name.upper()
        default = env(variable)
        parser.add_argument(
            flag,
            dest=name,
            type=parse_duration,
            default=parse_duration(default) if default else getattr(defaults, name),
            metavar="DURATION",
            help=f"{help} (env {variable}; default {getattr(defaults, name):g} s)",
        )

    duration(
        "--http-header-timeout",
        "http_header_timeout",
        "a new HTTP connection's first request head must arrive within this, or 408",
    )
    duration(
        "--http-body-timeout",
        "http_body_timeout",
        "an HTTP request's body must arrive within this of its head, or 408",
    )
    duration(
        "--http-idle-timeout",
        "http_idle_timeout",
        "an HTTP connection idle between requests is closed after this",
    )
    duration(
        "--http-write-timeout",
        "http_write_timeout",
        "an event stream whose client takes nothing for this long is dropped (it "
        "resumes with Last-Event-ID)",
    )
    parser.add_argument(
        "--http-max-pending-per-peer",
        type=int,
        default=int(
            env("TURNKEEPER_HTTP_MAX_PENDING_PER_PEER") or defaults.http_max_pending_per_peer
        ),
        help="HTTP connections one address may hold open before sending a request; past "
        "it a new one is answered 429 (env TURNKEEPER_HTTP_MAX_PENDING_PER_PEER; "
        "default %(default)s)",
    )

    def count(flag: str, name: str, help: str) -> None:
        variable = "TURNKEEPER_" + name.upper()
        parser.add_argument(
            flag,
            dest=name,
            type=int,
            default=int(env(variable) or getattr(defaults, name)),
            metavar="N",
            help=f"{help} (env {variable}; default %(default)s)",
        )

    count(
        "--http-max-connections",
        "http_max_connections",
        "HTTP connections open at once; past it a new one is answered 503 and closed "
        "(lowered to fit the open-files limit)",
    )
    count(
        "--http-max-connections-per-peer",
        "http_max_connections_per_peer",
        "HTTP connections one address may hold open (event streams included); past it "
        "a new one is answered 429 and closed",
    )
    count(
        "--grpc-max-connections",
        "grpc_max_connections",
        "gRPC connections open at once; past it a new one is closed at accept "
        "(lowered to fit the open-files limit)",
    )
    count(
        "--grpc-max-streams-per-connection",
        "grpc_max_streams_per_connection",
        "concurrent RPCs on one gRPC connection (HTTP/2 MAX_CONCURRENT_STREAMS)",
    )
    duration(
        "--grpc-idle-timeout",
        "grpc_idle_timeout",
        "a gRPC connection without an RPC for this long is closed (GOAWAY)",
    )
    duration(
        "--grpc-handshake-timeout",
        "grpc_handshake_timeout",
        "a new gRPC connection must finish its TLS and HTTP/2 handshake within this",
    )


def raise_fd_limit() -> tuple[int, int]:
    """The soft limit on open files raised to the hard one (decision 181): a
    service holding many connections runs out of descriptors at the soft limit,
    and then its storage cannot open a file either. Returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:
            target = int(Path("/proc/sys/fs/nr_open").read_text())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            log.warning("could not raise the open-files limit from %d: %s", soft, exc)
            return soft, soft
        log.info("open-files limit raised from %d to %d (the hard limit)", soft, target)
        return soft, target
    log.info("open-files limit: %d", soft)
    return soft, soft


def fit_connections(settings: Settings, open_files: int) -> Settings:
    """The connection caps lowered to fit the open-files limit (decision 274): a
    quarter of it (at most 1024) stays for the stores, NATS and the rest, the other
    three quarters are shared between HTTP and gRPC, so a flood of connections
    reaches a cap, never the limit, and the service keeps answering."""
    reserve = min(1024, open_files // 4)
    share = max(1, (open_files - reserve) // 2)
    http = min(settings.http_max_connections, share)
    grpc_ = min(settings.grpc_max_connections, share)
    if (http, grpc_) == (settings.http_max_connections, settings.grpc_max_connections):
        return settings
    log.warning(
        "connections capped at %d HTTP and %d gRPC to fit the open-files limit of %d "
        "(raise the hard limit: ulimit -Hn, LimitNOFILE=, docker --ulimit nofile=)",
        http,
        grpc_,
        open_files,
    )
    return dataclasses.replace(
        settings,
        http_max_connections=http,
        http_max_connections_per_peer=min(settings.http_max_connections_per_peer, http),
        grpc_max_connections=grpc_,
    )


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


def _flag(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def add_security_arguments(parser: argparse.ArgumentParser) -> None:
    """TLS, tokens and the exposed-port rule (security.py, auth.py)."""
    env = os.environ.get
    parser.add_argument(
        "--tls-cert",
        type=Path,
        default=_path(env("TURNKEEPER_TLS_CERT")),
        help="server certificate chain, PEM (env TURNKEEPER_TLS_CERT)",
    )
    parser.add_argument(
        "--tls-key",
        type=Path,
        default=_path(env("TURNKEEPER_TLS_KEY")),
        help="server private key, PEM (env TURNKEEPER_TLS_KEY)",
    )
    parser.add_argument(
        "--tls-client-ca",
        type=Path,
        default=_path(env("TURNKEEPER_TLS_CLIENT_CA")),
        help="CA that signs client certificates: turns on mutual TLS "
        "(env TURNKEEPER_TLS_CLIENT_CA)",
    )
    parser.add_argument(
        "--tokens-file",
        type=Path,
        default=_path(env("TURNKEEPER_TOKENS_FILE")),
        help="bearer-token hashes and roles, JSON lines; without it authentication is off "
        "(env TURNKEEPER_TOKENS_FILE; make entries with python -m turnkeeper_server.security.auth)",
    )
    parser.add_argument(
        "--webhook-secret-file",
        type=Path,
        default=_path(env("TURNKEEPER_WEBHOOK_SECRET_FILE")),
        help="the secrets LangGraph API runs' webhooks are signed with, one a line "
        "(whsec_ and base64); without it a run with a webhook is refused "
        "(env TURNKEEPER_WEBHOOK_SECRET_FILE; docs/operators.md)",
    )
    parser.add_argument(
        "--webhook-allow",
        dest="webhook_allow",
        action="append",
        default=[h for h in env("TURNKEEPER_WEBHOOK_ALLOW", "").split(",") if h.strip()],
        help="an address, network (CIDR) or host name webhooks may reach besides public "
        "addresses (loopback, private and link-local ones are refused by default); "
        "repeatable (env TURNKEEPER_WEBHOOK_ALLOW, comma-separated)",
    )
    parser.add_argument(
        "--webhook-timeout",
        type=float,
        default=float(env("TURNKEEPER_WEBHOOK_TIMEOUT", "10")),
        help="seconds one webhook attempt may take (env TURNKEEPER_WEBHOOK_TIMEOUT)",
    )
    parser.add_argument(
        "--webhook-retry-base",
        type=float,
        default=float(env("TURNKEEPER_WEBHOOK_RETRY_BASE", "2")),
        help="seconds before a webhook's first retry, doubled at each next one up to "
        "--webhook-retry-cap (env TURNKEEPER_WEBHOOK_RETRY_BASE)",
    )
    parser.add_argument(
        "--webhook-retry-cap",
        type=float,
        default=float(env("TURNKEEPER_WEBHOOK_RETRY_CAP", "600")),
        help="the longest wait between two webhook attempts, seconds "
        "(env TURNKEEPER_WEBHOOK_RETRY_CAP)",
    )
    parser.add_argument(
        "--webhook-max-attempts",
        type=int,
        default=int(env("TURNKEEPER_WEBHOOK_MAX_ATTEMPTS", "12")),
        help="attempts at a webhook before it is given up, recorded failed "
        "(env TURNKEEPER_WEBHOOK_MAX_ATTEMPTS)",
    )
    parser.add_argument(
        "--tokens-poll-seconds",
        type=float,
        default=float(env("TURNKEEPER_TOKENS_POLL_SECONDS", "1")),
        help="how often the tokens file is checked for changes; it is also re-read on "
        "SIGHUP; 0: on SIGHUP only (env TURNKEEPER_TOKENS_POLL_SECONDS)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        default=_flag(env("TURNKEEPER_INSECURE")),
        help="listen on a non-loopback address without TLS and authentication anyway "
        "(env TURNKEEPER_INSECURE=1); logged as a warning at every start",
    )
    parser.add_argument(
        "--max-watch-streams",
        type=int,
        default=int(
            env("TURNKEEPER_MAX_WATCH_STREAMS", DEFAULT_LIMITS.max_watch_streams_per_client)
        ),
        help="open WatchTurn and SSE streams per token and peer address (per address "
        "without tokens); past it RESOURCE_EXHAUSTED, 429 on SSE "
        "(env TURNKEEPER_MAX_WATCH_STREAMS)",
    )
    parser.add_argument(
        "--no-reflection",
        dest="reflection",
        action="store_false",
        default=env("TURNKEEPER_REFLECTION", "1") != "0",
        help="turn server reflection off (env TURNKEEPER_REFLECTION=0)",
    )
    parser.add_argument(
        "--no-gc-freeze",
        dest="gc_freeze",
        action="store_false",
        default=env("TURNKEEPER_GC_FREEZE", "1") != "0",
        help="leave what startup allocated to Python's cyclic collector instead of "
        "freezing it (env TURNKEEPER_GC_FREEZE=0; for measuring, bench/ingest.py)",
    )


DEFAULT_HTTP_PORT = 50080


def _http_listen(args: argparse.Namespace) -> tuple[str | None, bool]:
    """(HOST:PORT of the HTTP side or None, whether the port is the default one)."""
    given = args.http_port
    if given is None and os.environ.get("TURNKEEPER_HTTP_PORT"):
        given = int(os.environ["TURNKEEPER_HTTP_PORT"])
    port = DEFAULT_HTTP_PORT if given is None else given
    if port < 0:
        return None, False
    unix = args.listen.startswith(("unix:", "unix-abstract:"))
    host = "127.0.0.1" if unix or ":" not in args.listen else args.listen.rpartition(":")[0]
    return f"{host}:{port}", given is None


def settings_from_args(
    args: argparse.Namespace, nats_url: str | None, nats: NatsAuth | None = None
) -> Settings:
    if args.database_url:
        # Unused with PostgreSQL; not resolved, so no warning about a temporary dir.
        turns_path, sessions_path = Path("turns.db"), Path("sessions.db")
    else:
        turns_path, sessions_path = resolve_paths(args.data_dir)
    http_listen, default_port = _http_listen(args)
    # ValueError with the bad entry: reported like every configuration error.
    version_policies = VersionPolicies.parse(
        args.default_version_policy, list(args.version_policies)
    )
    if args.langgraph_stream not in ("live", "settled"):
        raise ValueError(
            f"TURNKEEPER_LANGGRAPH_STREAM={args.langgraph_stream!r}: must be 'live' or 'settled'"
        )
    return Settings(
        http_listen=http_listen,
        http_any_port_if_busy=default_port,
        http_allowed_hosts=tuple(h.strip() for h in args.allowed_hosts),
        http_cors_origins=tuple(o.strip().rstrip("/") for o in args.cors_origins),
        langgraph_auth=args.langgraph_auth,
        langgraph_config=args.langgraph_config,
        langgraph_stream=args.langgraph_stream,
        owners_edit_state=args.owners_edit_state,
        http_header_timeout=args.http_header_timeout,
        http_body_timeout=args.http_body_timeout,
        http_idle_timeout=args.http_idle_timeout,
        http_max_pending_per_peer=args.http_max_pending_per_peer,
        http_max_connections=args.http_max_connections,
        http_max_connections_per_peer=args.http_max_connections_per_peer,
        grpc_max_connections=args.grpc_max_connections,
        grpc_max_streams_per_connection=args.grpc_max_streams_per_connection,
        http_write_timeout=args.http_write_timeout,
        grpc_idle_timeout=args.grpc_idle_timeout,
        grpc_handshake_timeout=args.grpc_handshake_timeout,
        turns_path=turns_path,
        sessions_path=sessions_path,
        database_url=args.database_url,
        listen=args.listen,
        nats_url=nats_url,
        nats_auth=nats if nats is not None else nats_auth.from_args(args),
        subject_prefix=args.subject_prefix,
        jetstream=args.jetstream,
        jetstream_duplicate_window=args.jetstream_duplicate_window,
        namespace=args.namespace,
        lease_seconds=args.lease_seconds,
        max_redrives=args.max_redrives,
        version_policies=version_policies,
        status_cache_turns=args.status_cache_turns,
        max_run_seconds=args.max_run_time,
        park_expiry_seconds=args.park_expiry,
        retention_seconds=args.retention,
        turn_retention_seconds=args.turn_retention,
        metrics_listen=args.metrics_listen,
        shutdown_timeout=args.shutdown_timeout,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        tokens_file=args.tokens_file,
        tokens_poll_seconds=args.tokens_poll_seconds,
        webhooks=WebhookSettings(
            secret_file=args.webhook_secret_file,
            allow=tuple(h.strip() for h in args.webhook_allow),
            timeout=args.webhook_timeout,
            retry_base=args.webhook_retry_base,
            retry_cap=args.webhook_retry_cap,
            max_attempts=args.webhook_max_attempts,
        ),
        insecure=args.insecure,
        reflection=args.reflection,
        limits=dataclasses.replace(
            DEFAULT_LIMITS, max_watch_streams_per_client=args.max_watch_streams
        ),
    )


async def serve(args: argparse.Namespace) -> int:
    embedded: EmbeddedNats | None = None
    nats_url = args.nats_url
    server = None
    published: Path | None = None
    settings: Settings | None = None
    _, open_files = raise_fd_limit()
    try:
        try:
            nats = nats_auth.from_args(args)
            if nats_url is None and not args.no_nats:
                if args.database_url:
                    raise ValueError(SHARED_NATS)
                embedded, nats = _bundled_nats(args, nats)
                nats_url = embedded.start()
                log.info(
                    "started a bundled nats-server at %s (pass --nats-url to use yours)",
                    nats_url,
                )
            settings = fit_connections(settings_from_args(args, nats_url, nats), open_files)
            server = await create_server(settings)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or settings is None or not settings.http_listen:
                raise
            # The default HTTP port moves to a free one; a port given does not.
            log.error(
                "HTTP port %s is in use (another service, or `langgraph dev`?): pass "
                "another --http-port (env TURNKEEPER_HTTP_PORT), 0 for any free port, "
                "or -1 for no HTTP",
                settings.http_listen.rpartition(":")[2],
            )
            return 2
        except (InsecureListen, ValueError, StoreInUse, Unavailable) as exc:
            # Configuration, not a crash: say what is wrong without a traceback.
            log.error("%s", exc)
            return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # SIGTERM is what `docker stop` and Kubernetes send; SIGINT is Ctrl-C.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        # SIGHUP: read the tokens file again (add or revoke tokens without a restart).
        loop.add_signal_handler(signal.SIGHUP, server.reload_tokens)
        if embedded is not None and embedded.config_file is not None and server.tokens:
            tokens = server.tokens

            def nats_users(_reload: object) -> None:
                # The bundled server's users follow the tokens file.
                _write_nats_users(args, tokens)
                embedded.reload()

            server.on_tokens_reloaded.append(nats_users)
        if args.gc_freeze:
            # What startup made (modules, descriptors, grpc's and LangGraph's objects)
            # lives as long as the process: out of the collector's reach, the full
            # collections that requests' garbage sets off stop walking it (decision 156).
            gc.freeze()
            log.info(
                "%d objects from startup frozen out of the cyclic garbage collector",
                gc.get_freeze_count(),
            )
        print(f"turnkeeper listening on {server.address}", flush=True)
        if server.web is not None:
            print(f"turnkeeper console on {server.web.url}console/", flush=True)
        if nats_url is not None:
            # Agents on this machine find the NATS here without NATS_URL (decision 306).
            published = local_services.publish(server.address, nats_url)
            if published is not None:
                log.info(
                    "NATS URL published for agents on this machine in %s (an agent with "
                    "TURNKEEPER_ADDRESS=%s and no NATS_URL uses it)",
                    published,
                    server.address,
                )
        await stop.wait()
        # Bounded first, then said: once the line is out, a second signal stops it.
        _bound_shutdown(loop, server.settings.shutdown_timeout)
        log.info(
            "signal received: shutting down within %g s (a second signal stops at once)",
            server.settings.shutdown_timeout,
        )
    finally:
        local_services.withdraw(published)
        if server is not None:
            await server.stop()
        if embedded is not None:
            embedded.stop()
    return 0


# The exit status when the shutdown deadline passed before the stop finished.
FORCED_EXIT = 1


def _bound_shutdown(loop: asyncio.AbstractEventLoop, timeout: float) -> None:
    """From the first signal on, the stop is bounded (decision 319): a second SIGTERM
    or SIGINT gets the signal's default action (the kernel ends the process at once,
    whatever the event loop is doing), and a watchdog thread, which no blocked loop
    or thread holds up, exits the process when `timeout` has passed. Neither loses
    anything acknowledged: every acknowledged write is committed, an unpublished
    outbox row stays stored, and a turn mid-run is re-driven when its lease lapses."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
        signal.signal(sig, signal.SIG_DFL)

    def expire() -> None:
        log.error(
            "shutdown did not finish within %g s (--shutdown-timeout): exiting now; "
            "what was acknowledged is stored, unpublished outbox rows go at the next "
            "start",
            timeout,
        )
        logging.shutdown()
        os._exit(FORCED_EXIT)

    watchdog = threading.Timer(timeout, expire)
    watchdog.name = "turnkeeper-shutdown-deadline"
    watchdog.daemon = True
    watchdog.start()


# Replicas of one database hand turns to each other's agents over NATS: each on its
# own bundled nats-server, a hand-off goes where no agent listens (decision 200).
SHARED_NATS = (
    "--database-url without --nats-url: replicas of one database must share one NATS, "
    "and a bundled nats-server is this replica's alone. Pass --nats-url nats://HOST:4222 "
    "(the same NATS for every replica of the database; env TURNKEEPER_NATS_URL), or "
    "--no-nats to run without hand-offs"
)


def _bundled_nats(args: argparse.Namespace, nats: NatsAuth) -> tuple[EmbeddedNats, NatsAuth]:
    """The bundled nats-server: with tokens, a user per token allowed only its own
    subjects and one for the service (messaging/credentials.py); open otherwise
    (the quick start)."""
    if args.tokens_file is None:
        return EmbeddedNats(jetstream=args.jetstream), nats
    config, service = _write_nats_users(args, TokenStore.load(args.tokens_file))
    log.info(
        "the bundled nats-server has a user per token of %s, each allowed only its own "
        "subjects: an agent or panel connects with its turnkeeper token "
        "(TURNKEEPER_TOKEN) and nothing else",
        args.tokens_file,
    )
    return EmbeddedNats(jetstream=args.jetstream, config_file=config), dataclasses.replace(
        nats, credentials=None, nkey_seed=None, token_file=None, identity=service
    )


def _write_nats_users(args: argparse.Namespace, tokens: TokenStore) -> tuple[Path, NatsIdentity]:
    data_dir = resolve_paths(args.data_dir)[0].parent
    return write_config(
        data_dir,
        {digest: (c.role, c.agent) for digest, c in tokens.names().items()},
        prefix=args.subject_prefix,
        namespace=args.namespace,
    )


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, args.log_format)
    log.info("grpc I/O engine: %s", io_engine.describe())
    try:
        # Traces only when the OTEL_* variables ask for them (turnkeeper._tracing).
        tracing.configure_from_env("turnkeeper")
    except RuntimeError as exc:
        log.error("%s", exc)
        return 2
    return asyncio.run(serve(args))


# The names the client's CLI looks up on an entry point of `turnkeeper.commands`.
add_arguments = add_serve_arguments


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="turnkeeper-server", description=HELP)
    add_serve_arguments(parser)
    return run(parser.parse_args(argv))
