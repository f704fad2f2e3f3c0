"""The bundled nats-server's credentials when the service has tokens.

With a tokens file the gRPC side is locked; the NATS side must be too, or anyone
who reaches the bundled server could publish `responses/*` requests to agents and
read every turn's events. The service then generates a random token into its data
directory (`nats.token`, owner-only, kept across restarts so agents stay
configured) and starts nats-server with a config file (owner-only too, as it holds
the token) that requires it. Agents point `TURNKEEPER_NATS_TOKEN_FILE` at a copy
of `nats.token`.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

TOKEN_FILE = "nats.token"
CONFIG_FILE = "nats-server.conf"


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    # O_CREAT's mode applies to new files only.
    path.chmod(0o600)


def bundled_credentials(data_dir: Path) -> tuple[Path, Path]:
    """(nats-server config file, token file) in `data_dir`; the token is made once."""
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    token_path = data_dir / TOKEN_FILE
    token = token_path.read_text().strip() if token_path.exists() else ""
    if not token:
        token = secrets.token_urlsafe(32)
        _write_private(token_path, token + "\n")
    config_path = data_dir / CONFIG_FILE
    # token_urlsafe's alphabet (letters, digits, '-', '_') needs no escaping.
    _write_private(config_path, f'authorization {{\n  token: "{token}"\n}}\n')
    return config_path, token_path
