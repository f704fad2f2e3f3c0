"""The bundled nats-server's users when the service has tokens: one per token, each
allowed only its own subjects (turnkeeper._nats_identity says who may do what).

With a tokens file the gRPC and HTTP sides are locked; NATS must be too, and more:
one shared secret would let any agent host read every agent's requests and events
and forge the service's control notices. So the service writes a nats-server
config (owner-only, in its data directory) with

- its own user, `turnkeeper-service`, whose random password is kept in
  `nats-service.password` (owner-only, across restarts): the only user that may
  publish mirrored events, rewinds, hand-offs and control notices;
- a user per `agent:<name>` token: subscribe to that agent's request and control
  subjects and to the service's discover requests, publish to its own request
  subject (the bridge's readiness probe), its own announcements (the LangGraph
  API's assistants) and its replies, receive replies on its own inbox;
- a user per other token (panel, operator, admin): publish requests to any agent
  (each carries a caller assertion the bridge verifies), subscribe to the turns'
  events and rewinds, receive replies on its own inbox.

Users and passwords derive from the tokens' SHA-256 (turnkeeper._nats_identity), so
a process connects with its turnkeeper token alone. The config is written again
and the server reloaded when the tokens file changes.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

from turnkeeper._nats_identity import NatsIdentity, identity_of_digest

SERVICE_USER = "turnkeeper-service"
PASSWORD_FILE = "nats-service.password"
CONFIG_FILE = "nats-server.conf"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    # O_CREAT's mode applies to new files only.
    path.chmod(0o600)


def service_identity(data_dir: Path) -> NatsIdentity:
    """The service's own user; its password is made once and kept."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = data_dir / PASSWORD_FILE
    password = path.read_text().strip() if path.exists() else ""
    if not password:
        password = secrets.token_urlsafe(32)
        _write_private(path, password + "\n")
    return NatsIdentity(user=SERVICE_USER, password=password, inbox_prefix="_INBOX")


def _agents(prefix: str, namespace: str, agent: str) -> str:
    return f"{prefix}.{namespace}.agents.{agent}"


def users(
    service: NatsIdentity,
    tokens: Mapping[str, tuple[str, str | None]],
    *,
    prefix: str,
    namespace: str,
) -> list[dict[str, object]]:
    """The `users` of the config: the service's, and one per token (SHA-256 hex to
    (role, agent))."""
    out: list[dict[str, object]] = [{"user": service.user, "password": service.password}]
    for digest, (role, agent) in sorted(tokens.items()):
        me = identity_of_digest(digest)
        inbox = f"{me.inbox_prefix}.>"
        if role == "agent" and agent is not None:
            subjects = _agents(prefix, namespace, agent)
            permissions: dict[str, object] = {
                "publish": {"allow": [f"{subjects}.tasks", f"{subjects}.announce"]},
                "subscribe": {
                    "allow": [
                        f"{subjects}.tasks",
                        f"{subjects}.control",
                        # Hand-offs for one graph version (docs/versions.md).
                        f"{subjects}.versions.*",
                        # Hand-offs that carry their claim, to one incarnation.
                        f"{subjects}.replicas.*",
                        f"{prefix}.{namespace}.discover",
                        inbox,
                    ]
                },
                "allow_responses": True,
            }
        else:
            permissions = {
                "publish": {"allow": [f"{prefix}.{namespace}.agents.*.tasks"]},
                "subscribe": {"allow": [f"{prefix}.turn.>", inbox]},
                "allow_responses": True,
            }
        out.append({"user": me.user, "password": me.password, "permissions": permissions})
    return out


def write_config(
    data_dir: Path,
    tokens: Mapping[str, tuple[str, str | None]],
    *,
    prefix: str,
    namespace: str,
) -> tuple[Path, NatsIdentity]:
    """(nats-server config file, the service's identity) in `data_dir`."""
    service = service_identity(data_dir)
    # nats-server's config format takes JSON values.
    body = json.dumps(
        users(service, tokens, prefix=prefix, namespace=namespace), indent=2, sort_keys=True
    )
    path = data_dir / CONFIG_FILE
    _write_private(path, f"authorization {{\n  users = {body}\n}}\n")
    return path, service
