"""The ``postgres`` image in the compose harness: the PostgreSQL 16 of the `pgserver`
wheel, prepared as the image's entrypoint would prepare it, then run in the
foreground on TCP like the container's server.

The image reads POSTGRES_USER, POSTGRES_DB and POSTGRES_HOST_AUTH_METHOD; this makes
the same role and database in a cluster that trusts local connections (what
``trust`` asks for). pgserver runs the server as its own unprivileged user when the
tests run as root, and its data directory must be reachable by that user, so the
directory is one of its own under the system's temporary directory, not the test's
private tmp (as in tests/support/postgres.py).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import psycopg
from pgserver import _commands
from pgserver.postgres_server import get_server

# The container's data directory, where the compose file mounts its volume.
DATA_PATH = "/var/lib/postgresql/data"
PORT = 5432


@dataclass(frozen=True)
class Cluster:
    root: Path
    pgdata: Path
    # The system user the server runs as; None when the tests are not root.
    user: str | None

    def argv(self, port: int) -> list[str]:
        """The server in the foreground on 127.0.0.1:port (and a socket in pgdata)."""
        return [
            str(_commands.POSTGRES_BIN_PATH / "postgres"),
            "-D",
            str(self.pgdata),
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-k",
            str(self.pgdata),
        ]

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def bin_dir() -> str:
    """Where pg_isready and the other client tools are (the image has them on PATH)."""
    return str(_commands.POSTGRES_BIN_PATH)


def prepare(env: dict[str, str]) -> Cluster:
    """A cluster with the image's role and database, stopped, ready to run."""
    role = env.get("POSTGRES_USER", "postgres")
    database = env.get("POSTGRES_DB", role)
    root = Path(tempfile.mkdtemp(prefix="turnkeeper-compose-pg-"))
    pgdata = root / "pgdata"
    # pgserver initialises the directory (as its own user when root) and starts a
    # server on a socket; the role and database are made through it, then it stops.
    server = get_server(pgdata, cleanup_mode=None)
    with psycopg.connect(server.get_uri(), autocommit=True) as conn:
        if role != "postgres":
            conn.execute(f'CREATE ROLE "{role}" LOGIN SUPERUSER')
        if database != "postgres":
            conn.execute(f'CREATE DATABASE "{database}" OWNER "{role}"')
    pg_ctl = _commands.pg_ctl  # type: ignore[attr-defined]  # made at import time
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata, user=server.system_user)
    return Cluster(root, pgdata, server.system_user)
