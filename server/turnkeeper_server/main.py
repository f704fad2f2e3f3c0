"""`turnkeeper serve`: flags and env to Settings, signals to a graceful stop."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
from pathlib import Path

from turnkeeper_server import logs
from turnkeeper_server.app import create_server
from turnkeeper_server.config import Settings, resolve_paths
from turnkeeper_server.durations import add_lifecycle_arguments
from turnkeeper_server.messaging.embedded import EmbeddedNats
from turnkeeper_server.rpc.limits import DEFAULT_LIMITS
from turnkeeper_server.security.transport import InsecureListen

log = logging.getLogger("turnkeeper")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument(
        "--listen",
        default=env("TURNKEEPER_LISTEN", "127.0.0.1:50051"),
        help="gRPC listen address (env TURNKEEPER_LISTEN)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="directory for turns.db and sessions.db (overrides "
        "VYSTAK_TURNS_PATH and VYSTAK_SESSIONS_PATH)",
    )
    parser.add_argument(
        "--nats-url",
        default=env("TURNKEEPER_NATS_URL") or env("NATS_URL"),
        help="NATS server URL (env TURNKEEPER_NATS_URL or NATS_URL); "
        "without one a bundled nats-server is started",
    )
    parser.add_argument(
        "--no-nats", action="store_true", help="run without NATS: no mirroring, no hand-offs"
    )
    parser.add_argument(
        "--subject-prefix",
        default=env("TURNKEEPER_SUBJECT_PREFIX", "vystak"),
        help="NATS subject prefix (env TURNKEEPER_SUBJECT_PREFIX)",
    )
    parser.add_argument(
        "--namespace",
        default=env("TURNKEEPER_NAMESPACE", "default"),
        help="agent subject namespace (env TURNKEEPER_NAMESPACE)",
    )
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=float(env("TURNKEEPER_LEASE_SECONDS", "15")),
        help="executor lease without a heartbeat (env TURNKEEPER_LEASE_SECONDS)",
    )
    parser.add_argument(
        "--max-redrives", type=int, default=3, help="re-drives before an orphaned turn is FAILED"
    )
    add_lifecycle_arguments(parser)
    add_security_arguments(parser)
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
        help="open WatchTurn streams per token (per peer address without tokens); past it "
        "RESOURCE_EXHAUSTED (env TURNKEEPER_MAX_WATCH_STREAMS)",
    )
    parser.add_argument(
        "--no-reflection",
        dest="reflection",
        action="store_false",
        default=env("TURNKEEPER_REFLECTION", "1") != "0",
        help="turn server reflection off (env TURNKEEPER_REFLECTION=0)",
    )


def settings_from_args(args: argparse.Namespace, nats_url: str | None) -> Settings:
    turns_path, sessions_path = resolve_paths(args.data_dir)
    return Settings(
        turns_path=turns_path,
        sessions_path=sessions_path,
        listen=args.listen,
        nats_url=nats_url,
        subject_prefix=args.subject_prefix,
        namespace=args.namespace,
        lease_seconds=args.lease_seconds,
        max_redrives=args.max_redrives,
        max_run_seconds=args.max_run_time,
        park_expiry_seconds=args.park_expiry,
        retention_seconds=args.retention,
        metrics_listen=args.metrics_listen,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        tokens_file=args.tokens_file,
        insecure=args.insecure,
        reflection=args.reflection,
        limits=dataclasses.replace(
            DEFAULT_LIMITS, max_watch_streams_per_client=args.max_watch_streams
        ),
    )


async def serve(args: argparse.Namespace) -> int:
    embedded: EmbeddedNats | None = None
    nats_url = args.nats_url
    if nats_url is None and not args.no_nats:
        embedded = EmbeddedNats()
        nats_url = embedded.start()
        log.info("started a bundled nats-server at %s (pass --nats-url to use yours)", nats_url)
    server = None
    try:
        try:
            server = await create_server(settings_from_args(args, nats_url))
        except (InsecureListen, ValueError) as exc:
            # Configuration, not a crash: say what is wrong without a traceback.
            log.error("%s", exc)
            return 2
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        # SIGTERM is what `docker stop` and Kubernetes send; SIGINT is Ctrl-C.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"turnkeeper listening on {server.address}", flush=True)
        await stop.wait()
        log.info("signal received: shutting down")
    finally:
        if server is not None:
            await server.stop()
        if embedded is not None:
            embedded.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    logs.configure(args.log_level, args.log_format)
    return asyncio.run(serve(args))
