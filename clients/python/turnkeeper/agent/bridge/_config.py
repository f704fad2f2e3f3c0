"""The bridge's settings, and how they are read from the environment."""

from __future__ import annotations

import logging
import os
import re
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from turnkeeper import _local_services as local_services
from turnkeeper._nats_auth import NatsAuth
from turnkeeper.agent.bridge._admission import DEFAULT_MAX_TURNS
from turnkeeper.client import ConnectionOptions, default_address

log = logging.getLogger(__name__)

# An agent name is a NATS subject token (the service checks the same).
_AGENT: Final = re.compile(r"^[A-Za-z0-9_-]+$")
# Replica and incarnation are ids in the journal.
_ID: Final = re.compile(r"^[A-Za-z0-9._:@/+=-]+$")
# An incarnation that is one NATS subject token (a uuid's hex, the default).
_TOKEN: Final = re.compile(r"^[A-Za-z0-9_:@+=-]+$")
#: Where /healthz listens by default: a free port instead when another process (a
#: second agent on the machine) holds this one (decision 307).
DEFAULT_HEALTH_LISTEN: Final = "127.0.0.1:8080"


@dataclass(frozen=True)
class BridgeConfig:
    """Where the bridge listens and whom it talks to.

    ``replica`` must stay the same across restarts of the agent process (the
    container hostname by default): the startup Redrive takes back exactly the
    turns that ran under this name. ``incarnation`` is new for every config, i.e.
    every process start.
    """

    agent: str
    service: ConnectionOptions = field(default_factory=ConnectionOptions)
    nats_url: str = "nats://127.0.0.1:4222"
    # Credentials, nkey seed, token file, TLS (turnkeeper._nats_auth).
    nats_auth: NatsAuth = field(default_factory=NatsAuth)
    subject_prefix: str = "vystak"
    namespace: str = "default"
    replica: str = field(default_factory=socket.gethostname)
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)
    # HOST:PORT of GET /healthz; port 0 picks a free one. The default moves to a free
    # port when 8080 is taken (logged); an address given is kept, or start fails.
    health_listen: str = DEFAULT_HEALTH_LISTEN
    # How long shutdown waits for running turns before leaving them for a re-drive.
    shutdown_grace: float = 10.0
    # Host the graph for the LangGraph API (docs/langgraph-api.md): journal a
    # ``values`` event (the graph's state) with every checkpoint, and give each run
    # the ``configurable`` keys LangGraph's server gives (run_id, graph_id ...).
    langgraph_api: bool = False
    # The author's name for this version of the graph (docs/versions.md): part of
    # the graph's fingerprint, so a change the shape cannot see (a node's body, a
    # prompt) can still be told apart by the agent's version policy.
    version_label: str = ""
    # Turns this replica executes at once; past it a turn waits, visibly, for a free
    # slot (agent/bridge/_admission.py). 0: no limit.
    max_turns: int = DEFAULT_MAX_TURNS
    # The checkpointer's runs on one checkpoint stream (decision 155) or a stream
    # each; None: RemoteSaver's default ($TURNKEEPER_SAVER_SHARE_STREAM, else a
    # stream each). `turnkeeper agent` shares unless told not to (decision 600).
    share_stream: bool | None = None

    def __post_init__(self) -> None:
        if not _AGENT.match(self.agent):
            raise ValueError(f"agent {self.agent!r}: letters, digits, '_' and '-' only")
        for name in ("replica", "incarnation"):
            if not _ID.match(getattr(self, name)):
                raise ValueError(
                    f"{name} {getattr(self, name)!r} has characters the journal refuses"
                )
        if len(self.version_label) > 128 or not self.version_label.isprintable():
            raise ValueError(
                f"version_label {self.version_label!r}: at most 128 printable characters"
            )
        if isinstance(self.max_turns, bool) or not isinstance(self.max_turns, int):
            raise ValueError(f"max_turns {self.max_turns!r}: a whole number (0: no limit)")
        if self.max_turns < 0:
            raise ValueError(f"max_turns {self.max_turns}: 0 (no limit) or more")
        self.health_address  # noqa: B018  (validates health_listen)

    @property
    def subject(self) -> str:
        """``<prefix>.<ns>.agents.<name>.tasks``: where requests for the agent go."""
        return f"{self.subject_prefix}.{self.namespace}.agents.{self.agent}.tasks"

    @property
    def control_subject(self) -> str:
        """``<prefix>.<ns>.agents.<name>.control``: what the service tells every replica
        of the agent (no queue group), e.g. to stop a turn that was cancelled."""
        return f"{self.subject_prefix}.{self.namespace}.agents.{self.agent}.control"

    def version_subject(self, fingerprint: str) -> str:
        """``<prefix>.<ns>.agents.<name>.versions.<fingerprint>``: hand-offs of turns
        the agent's version policy keeps for that graph version (docs/versions.md)."""
        return f"{self.subject_prefix}.{self.namespace}.agents.{self.agent}.versions.{fingerprint}"

    @property
    def replica_subject(self) -> str | None:
        """``<prefix>.<ns>.agents.<name>.replicas.<incarnation>``: hand-offs that carry
        their claim, to this incarnation alone (decision 590); None when the
        incarnation is no single subject token (it then takes the queue group's)."""
        if not _TOKEN.match(self.incarnation):
            return None
        return f"{self.subject_prefix}.{self.namespace}.agents.{self.agent}.replicas.{self.incarnation}"

    @property
    def announce_subject(self) -> str:
        """``<prefix>.<ns>.agents.<name>.announce``: where the replicas say they serve
        the agent, so the service lists it as an assistant."""
        return f"{self.subject_prefix}.{self.namespace}.agents.{self.agent}.announce"

    @property
    def discover_subject(self) -> str:
        """``<prefix>.<ns>.discover``: the service asks every replica to announce."""
        return f"{self.subject_prefix}.{self.namespace}.discover"

    @property
    def queue_group(self) -> str:
        """``agents.<name>``: each request reaches one replica of the agent."""
        return f"agents.{self.agent}"

    @property
    def health_address(self) -> tuple[str, int]:
        host, sep, port = self.health_listen.rpartition(":")
        if not sep or not port.isdigit():
            raise ValueError(f"health_listen {self.health_listen!r} is not HOST:PORT")
        return host.strip("[]") or "0.0.0.0", int(port)

    @classmethod
    def from_env(
        cls, agent: str | None = None, env: Mapping[str, str] | None = None, **overrides: Any
    ) -> BridgeConfig:
        """Settings from the environment; keyword arguments win.

        ======================================  ==================================
        ``TURNKEEPER_AGENT``                    agent name (or the ``agent`` arg)
        ``TURNKEEPER_ADDRESS``                  the service (``ConnectionOptions``)
        ``TURNKEEPER_TLS``                      ``1``: TLS with the system's roots
        ``TURNKEEPER_TLS_CA``                   CA bundle of the service (implies TLS)
        ``TURNKEEPER_TLS_CLIENT_CERT``          mutual TLS: client certificate ...
        ``TURNKEEPER_TLS_CLIENT_KEY``           ... and its key (both or neither)
        ``TURNKEEPER_TOKEN``                    bearer token (``agent:<name>`` role)
        ``TURNKEEPER_NATS_URL`` / ``NATS_URL``  NATS server (unset: the one a service
                                                on this machine published, else
                                                ``nats://127.0.0.1:4222``)
        ``TURNKEEPER_NATS_CREDS`` ...           NATS credentials and TLS: see
                                                :mod:`turnkeeper._nats_auth`
        ``TURNKEEPER_SUBJECT_PREFIX``           subject prefix (``vystak``)
        ``TURNKEEPER_NAMESPACE``                subject namespace (``default``)
        ``TURNKEEPER_REPLICA``                  replica name (the hostname)
        ``TURNKEEPER_HEALTH_LISTEN``            /healthz address (``127.0.0.1:8080``,
                                                or a free port when that is taken)
        ``TURNKEEPER_SHUTDOWN_GRACE``           seconds (``10``)
        ``TURNKEEPER_VERSION_LABEL``            the graph's version label (empty)
        ``TURNKEEPER_MAX_TURNS``                turns executed at once (``64``; 0:
                                                no limit); the rest wait, visibly
        ======================================  ==================================

        The connection settings are the CLI's (``turnkeeper --help``); the bridge's
        client and its checkpointer (RemoteSaver) both use them. A ``service=``
        override replaces them all.
        """
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        name = agent or env.get("TURNKEEPER_AGENT")
        if not name:
            raise ValueError("no agent name: pass agent= or set TURNKEEPER_AGENT")
        values["agent"] = name
        values["service"] = connection_from_env(env)
        nats_url = env.get("TURNKEEPER_NATS_URL") or env.get("NATS_URL")
        if not nats_url and "nats_url" not in overrides:
            # A service on this machine says where its NATS is (decision 306).
            nats_url = local_services.nats_url_for(values["service"].target)
            if nats_url:
                log.info(
                    "NATS at %s: where the turnkeeper service at %s says its NATS is "
                    "(NATS_URL to choose another)",
                    nats_url,
                    values["service"].target,
                )
        if nats_url:
            values["nats_url"] = nats_url
        values["nats_auth"] = NatsAuth.from_env(env)
        for key, attr in (
            ("TURNKEEPER_SUBJECT_PREFIX", "subject_prefix"),
            ("TURNKEEPER_NAMESPACE", "namespace"),
            ("TURNKEEPER_REPLICA", "replica"),
            ("TURNKEEPER_HEALTH_LISTEN", "health_listen"),
            ("TURNKEEPER_VERSION_LABEL", "version_label"),
        ):
            if env.get(key):
                values[attr] = env[key]
        if env.get("TURNKEEPER_SHUTDOWN_GRACE"):
            values["shutdown_grace"] = float(env["TURNKEEPER_SHUTDOWN_GRACE"])
        if raw := (env.get("TURNKEEPER_MAX_TURNS") or "").strip():
            try:
                values["max_turns"] = int(raw)
            except ValueError:
                raise ValueError(
                    f"TURNKEEPER_MAX_TURNS={raw!r}: a whole number of turns (0: no limit)"
                ) from None
        return cls(**(values | overrides))


_TRUE: Final = ("1", "true", "yes", "on")


def connection_from_env(env: Mapping[str, str]) -> ConnectionOptions:
    """The service connection from the same variables the CLI reads."""

    def get(key: str) -> str | None:
        return env.get(key) or None

    return ConnectionOptions(
        target=get("TURNKEEPER_ADDRESS") or default_address(),
        tls=(env.get("TURNKEEPER_TLS") or "").strip().lower() in _TRUE,
        root_certificates=get("TURNKEEPER_TLS_CA"),
        client_certificate=get("TURNKEEPER_TLS_CLIENT_CERT"),
        client_key=get("TURNKEEPER_TLS_CLIENT_KEY"),
        bearer_token=get("TURNKEEPER_TOKEN"),
    )
