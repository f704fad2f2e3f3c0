"""Settings, and where the two SQLite files live (docs/architecture.md §7).

| file         | env override           | deployed default     | fallback                              |
|--------------|------------------------|----------------------|---------------------------------------|
| checkpointer | VYSTAK_SESSIONS_PATH   | /data/sessions.db    | <tempdir>/turnkeeper-<uid>/sessions.db |
| turn journal | VYSTAK_TURNS_PATH      | /data/turns.db       | <tempdir>/turnkeeper-<uid>/turns.db    |

Each file is chosen on its own, first match wins: an explicit `--data-dir DIR`
(both files in DIR), the file's env override, the deployed data dir
(`TURNKEEPER_DATA_DIR`, `/data` when unset) when it is a writable directory, then
a private directory of this user's in the temp dir, with a warning: created 0700,
and refused when another user owns it, others may enter it, or others may write a
file the service keeps there (decision 183). The image sets the data dir through
`TURNKEEPER_DATA_DIR`, not a flag, so the env overrides still win there. Which
source chose each path is logged at start.
`--database-url postgresql://...` (env TURNKEEPER_DATABASE_URL) keeps everything in
PostgreSQL instead, for any number of replicas on one database.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from turnkeeper._nats_auth import NatsAuth

from turnkeeper_server.journal.versions import VersionPolicies
from turnkeeper_server.limits import DEFAULT_LIMITS, Limits
from turnkeeper_server.store.status_cache import CACHED_TURNS
from turnkeeper_server.webhooks.settings import WebhookSettings

log = logging.getLogger(__name__)

SESSIONS_ENV = "VYSTAK_SESSIONS_PATH"
TURNS_ENV = "VYSTAK_TURNS_PATH"
DATA_DIR_ENV = "TURNKEEPER_DATA_DIR"
DEPLOYED_DATA_DIR = Path("/data")


@dataclass(frozen=True)
class Settings:
    turns_path: Path
    sessions_path: Path
    # postgresql://...: everything in that database instead of the two files above.
    database_url: str | None = None
    listen: str = "127.0.0.1:50051"
    # None: no NATS; the service runs and logs that mirroring is off.
    nats_url: str | None = None
    # How the NATS connection authenticates and encrypts, beside its URL.
    nats_auth: NatsAuth = field(default_factory=NatsAuth)
    subject_prefix: str = "vystak"
    # Keep a JetStream stream over `<prefix>.turn.>` (messaging/jetstream.py), whose
    # duplicate window (seconds) drops an outbox message published twice.
    jetstream: bool = False
    jetstream_duplicate_window: float = 300.0
    namespace: str = "default"
    # How long an executor's lease lasts without a heartbeat.
    lease_seconds: float = 15.0
    # How long a handed-out turn may wait for a replica to claim it.
    claim_seconds: float = 5.0
    # How often the reaper looks for expired leases.
    reap_interval: float = 1.0
    max_redrives: int = 3
    # Which replicas may continue a turn whose graph changed, per agent
    # (docs/versions.md; `compatible` unless the operator says otherwise).
    version_policies: VersionPolicies = field(default_factory=VersionPolicies)
    # Defaults of the per-turn deadlines the reaper enforces; 0 switches one off.
    # These are the defaults: `turnkeeper serve`'s flags and the docs take them from
    # here (decision 195).
    # How long a turn may stay RUNNING between a start or resume and its next park.
    # On by default: a running turn is a process at work, and a loop or a hung tool
    # keeps heartbeating, so no lease ends it, and it holds its thread (one live turn
    # per thread) until something does.
    max_run_seconds: float = 3600.0
    # How long a turn may stay PARKED waiting for ResumeDetached. Off by default: the
    # contract has no park expiry, a turn waiting for a human waits; an operator may
    # set one (`--park-expiry`).
    park_expiry_seconds: float = 0.0
    # How long a finished turn's events (and checkpoint history) are kept; 0: forever.
    retention_seconds: float = 0.0
    # How long a finished turn's row (and everything that still names it) is kept;
    # 0: forever. At least `retention_seconds` when both are on (retention.py).
    turn_retention_seconds: float = 0.0
    # How often the retention sweeper runs (when either retention is on).
    retention_interval: float = 60.0
    # "FULL" fsyncs every commit: an acknowledged write survives power loss too.
    synchronous: str = "FULL"
    # SQLite: turns whose TurnStatus columns are kept in memory (store/status_cache.py);
    # 0: every TurnStatus reads the file.
    status_cache_turns: int = CACHED_TURNS
    metrics_listen: str | None = None
    # How long in-flight RPCs get to finish at shutdown (within shutdown_timeout).
    shutdown_grace: float = 5.0
    # How long a stop may take from the first SIGTERM or SIGINT, whatever state the
    # database, NATS, agents and clients are in; past it the process exits at once
    # (main.py, decision 319). Well under Kubernetes' 30 s grace period.
    shutdown_timeout: float = 10.0
    limits: Limits = field(default_factory=lambda: DEFAULT_LIMITS)
    # Transport security (security.py): PEM files. A client CA turns on mutual TLS.
    tls_cert: Path | None = None
    tls_key: Path | None = None
    tls_client_ca: Path | None = None
    # Bearer-token hashes and roles (auth.py); None: authentication is off.
    tokens_file: Path | None = None
    # How often the tokens file is checked for changes (it is also re-read on
    # SIGHUP); 0: on SIGHUP only.
    tokens_poll_seconds: float = 1.0
    # Serve a non-loopback address without TLS and authentication anyway (logged).
    insecure: bool = False
    # Server reflection (grpcurl list/describe); with tokens on it needs a token.
    reflection: bool = True
    # The HTTP side (console, Connect JSON, SSE; web/): HOST:PORT, or None for none.
    http_listen: str | None = None
    # When the HTTP port is the default one and taken, serve on a free port instead.
    http_any_port_if_busy: bool = False
    # Host names served besides localhost, 127.0.0.1 and [::1] while the HTTP port
    # is on loopback without authentication (web/guard.py, decision 182).
    http_allowed_hosts: tuple[str, ...] = ()
    # Origins whose pages may call the LangGraph API from a browser (CORS; a panel
    # served from elsewhere, as LangGraph's server allows; web/langgraph/cors.py).
    http_cors_origins: tuple[str, ...] = ()
    # End users, the LangGraph way (web/langgraph/custom_auth.py): a
    # `langgraph_sdk.Auth` as "file.py:name" or "module:name" (`--langgraph-auth`), or
    # the `auth.path` of a langgraph.json (`--langgraph-config`), its file taken
    # relative to that file's folder and refused outside it. Neither: no end users.
    langgraph_auth: str | None = None
    langgraph_config: Path | None = None
    # How a LangGraph stream sends a model's tokens (web/langgraph/stream.py):
    # "live", as the model produces them, taken back with a rewind's `values` and
    # `remove` parts if a re-drive takes them back; or "settled", once their step's
    # checkpoint is durable, never taken back (decision 210). A run's stream may
    # ask for the other with the `X-Turnkeeper-Stream` header.
    langgraph_stream: str = "live"
    # LangGraph API runs' webhooks: the signing secret, the allow-list, retries
    # (webhooks/settings.py, docs/operators.md).
    webhooks: WebhookSettings = field(default_factory=WebhookSettings)
    # A thread's owner (its maker; its end user under a langgraph.json's auth) may
    # edit its state: update_state, a Command's update or goto, a fork. Off: only
    # operators and admins (and agents on their own threads) do; an owner answers
    # its thread's interrupt either way (decision 309).
    owners_edit_state: bool = False
    # Connections (decision 181). HTTP: a new connection's first request head must
    # arrive within the header timeout; a body within the body timeout of its head;
    # a connection idle between requests is closed after the idle timeout; one peer
    # address holds at most this many connections that have not sent a request yet.
    http_header_timeout: float = 10.0
    http_body_timeout: float = 30.0
    http_idle_timeout: float = 75.0
    http_max_pending_per_peer: int = 64
    # Open connections, counted before authentication (web/guard.py, decision 274):
    # in all, and from one address (each open TCP connection, whatever it carries;
    # 256 per address leaves one address 200 event streams at once, issue 51).
    http_max_connections: int = 4096
    http_max_connections_per_peer: int = 256
    # gRPC connections in all (grpc.max_allowed_incoming_connections; grpcio has no
    # per-address limit, decision 274), and streams on one connection.
    grpc_max_connections: int = 4096
    grpc_max_streams_per_connection: int = 1024
    # An event stream whose client takes nothing for this long is dropped; it
    # resumes with Last-Event-ID (web/sse.py, decision 184).
    http_write_timeout: float = 30.0
    # gRPC: a connection without an RPC for this long gets GOAWAY; a new connection
    # must finish its TLS and HTTP/2 handshake within the handshake timeout.
    grpc_idle_timeout: float = 300.0
    grpc_handshake_timeout: float = 10.0

    def __post_init__(self) -> None:
        if (
            min(
                self.http_header_timeout,
                self.http_body_timeout,
                self.http_idle_timeout,
                self.grpc_idle_timeout,
                self.grpc_handshake_timeout,
            )
            <= 0
        ):
            raise ValueError("connection timeouts must be longer than 0")
        if self.http_max_pending_per_peer < 1:
            raise ValueError("--http-max-pending-per-peer must be 1 or more")
        if min(self.http_max_connections, self.http_max_connections_per_peer) < 1:
            raise ValueError(
                "--http-max-connections and --http-max-connections-per-peer must be 1 or more"
            )
        if min(self.grpc_max_connections, self.grpc_max_streams_per_connection) < 1:
            raise ValueError(
                "--grpc-max-connections and --grpc-max-streams-per-connection must be 1 or more"
            )
        if self.status_cache_turns < 0:
            raise ValueError("--status-cache-turns must be 0 (no cache) or more")
        if self.retention_seconds < 0 or self.turn_retention_seconds < 0:
            raise ValueError("--retention and --turn-retention must be durations of 0 or more")
        if 0 < self.turn_retention_seconds < self.retention_seconds:
            raise ValueError(
                f"--turn-retention ({_seconds(self.turn_retention_seconds)}) is shorter than "
                f"--retention ({_seconds(self.retention_seconds)}): a turn row would be deleted "
                "before the events retention keeps for it. Set --turn-retention to at least "
                "--retention, or leave it off (0) to keep turn rows"
            )


def _seconds(value: float) -> str:
    return f"{value:g} s"


def _writable_dir(path: Path) -> bool:
    return path.is_dir() and os.access(path, os.W_OK | os.X_OK)


# What the service keeps in its data directory, beside the two databases: SQLite's
# own files, the lock file, and the bundled nats-server's password, config and token.
KEPT_FILES = (
    *(f"{db}{sfx}" for db in ("turns.db", "sessions.db") for sfx in ("", "-wal", "-shm")),
    "turns.db.lock",
    "nats-service.password",
    "nats-server.conf",
    "nats.token",
)

_TO_DO = (
    "give the service a directory of its own instead (--data-dir, TURNKEEPER_DATA_DIR, "
    "or VYSTAK_TURNS_PATH and VYSTAK_SESSIONS_PATH)"
)


def private_fallback_dir(tmp: Path | None = None) -> Path:
    """`<tmp>/turnkeeper-<uid>`: created 0700, or refused (ValueError) when it is not
    a directory of this user's that only this user may enter, or holds a file the
    service keeps there that is not this user's alone to write. The temp dir is
    shared: what another user planted there must not become our journal or our
    NATS password (decision 183)."""
    base = Path(tempfile.gettempdir()) if tmp is None else tmp
    uid = os.geteuid()
    path = base / f"turnkeeper-{uid}"
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise ValueError(
            f"refusing the temp-dir fallback {path}: it is not a directory (a symlink or "
            f"a file someone else may have planted); remove it, or {_TO_DO}"
        )
    if info.st_uid != uid:
        raise ValueError(
            f"refusing the temp-dir fallback {path}: it is owned by uid {info.st_uid}, "
            f"not by this user (uid {uid}), so another user may have planted it; "
            f"remove it, or {_TO_DO}"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise ValueError(
            f"refusing the temp-dir fallback {path}: its mode is "
            f"{stat.S_IMODE(info.st_mode):04o}, so other users may read or change what is "
            f"in it; run chmod 700 {path} (and check its files), or {_TO_DO}"
        )
    for name in KEPT_FILES:
        try:
            kept = (path / name).lstat()
        except FileNotFoundError:
            continue
        if (
            not stat.S_ISREG(kept.st_mode)
            or kept.st_uid != uid
            or stat.S_IMODE(kept.st_mode) & 0o022
        ):
            raise ValueError(
                f"refusing {path / name} in the temp-dir fallback: it is not a file only "
                f"this user (uid {uid}) may write (owner uid {kept.st_uid}, mode "
                f"{stat.S_IMODE(kept.st_mode):04o}), so it may have been planted; remove "
                f"it if it is not yours, or {_TO_DO}"
            )
    return path


def resolve_paths(
    data_dir: Path | None = None, env: Mapping[str, str] | None = None
) -> tuple[Path, Path]:
    """(turns_path, sessions_path) by the table above; logs where each came from."""
    env = os.environ if env is None else env
    if data_dir is not None:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    deployed = Path(env.get(DATA_DIR_ENV) or DEPLOYED_DATA_DIR)

    fallback_dir: Path | None = None

    def pick(what: str, env_name: str, filename: str) -> Path:
        nonlocal fallback_dir
        if data_dir is not None:
            path, source = data_dir / filename, "--data-dir"
        elif env.get(env_name):
            path, source = Path(env[env_name]), env_name
        elif _writable_dir(deployed):
            path = deployed / filename
            source = DATA_DIR_ENV if env.get(DATA_DIR_ENV) else "the deployed default"
        else:
            if fallback_dir is None:
                fallback_dir = private_fallback_dir()
            path, source = fallback_dir / filename, "the temp-dir fallback"
            log.warning(
                "%s is not set and %s is not a writable directory: using %s, "
                "which does not survive a reboot; set %s, %s or --data-dir",
                env_name,
                deployed,
                path,
                env_name,
                DATA_DIR_ENV,
            )
        log.info("%s: %s (chosen by %s)", what, path, source)
        return path

    return (
        pick("turn journal", TURNS_ENV, "turns.db"),
        pick("checkpointer", SESSIONS_ENV, "sessions.db"),
    )
