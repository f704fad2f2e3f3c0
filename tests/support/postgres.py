"""A real PostgreSQL for tests: the `pgserver` wheel's PostgreSQL 16, one throwaway
cluster per test session, a fresh database per test (CREATE DATABASE is cheap).

pgserver runs the server as an unprivileged `pgserver` user when the tests run as
root (it creates the user and opens the directory to it), and listens on a Unix
socket only; the URL carries the socket directory as `host=`.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pgserver import _commands
from pgserver.postgres_server import PostgresServer, get_server
from psycopg.conninfo import conninfo_to_dict
from turnkeeper_server.store.postgres import PostgresDatabase
from turnkeeper_server.store.postgres_pipeline import SendingConnection


class PostgresCluster:
    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self._server: PostgresServer | None = None
        self._names = itertools.count(1)

    @classmethod
    @contextlib.contextmanager
    def temporary(cls) -> Iterator[PostgresCluster]:
        """A started cluster in a directory of its own, removed afterwards. Not under
        pytest's basetemp: pgserver opens the directory's parents to its server user,
        and those are pytest's private ones."""
        root = Path(tempfile.mkdtemp(prefix="turnkeeper-pg-"))
        cluster = cls(root / "pgdata")
        reaper: subprocess.Popen[bytes] | None = None
        try:
            # pgserver creates its server user (useradd) outside its own lock: two
            # xdist workers starting their clusters at once on a fresh machine both
            # found it missing, and the second useradd failed.
            with _machine_lock():
                cluster.start()
            # Stops the server and removes `root` once this process is gone, even by
            # Ctrl-C or SIGKILL; and does the removal (a session's few hundred
            # databases, ~300 files each) off any test's clock.
            reaper = subprocess.Popen(
                [
                    sys.executable,
                    str(Path(__file__).with_name("pg_reaper.py")),
                    str(_commands.POSTGRES_BIN_PATH / "pg_ctl"),
                    str(cluster.pgdata),
                    str(root),
                    *([cluster.server.system_user] if cluster.server.system_user else []),
                ],
                stdin=subprocess.PIPE,
                start_new_session=True,
            )
            yield cluster
        finally:
            cluster.stop()
            if reaper is not None and reaper.stdin is not None:
                reaper.stdin.close()  # the reaper's turn, in the background

    def start(self) -> None:
        # "stop": stop the server when the session ends; temporary() removes the files.
        self._server = get_server(self.pgdata, cleanup_mode="stop")

    @property
    def server(self) -> PostgresServer:
        assert self._server is not None, "cluster not started"
        return self._server

    def url(self, database: str = "postgres") -> str:
        return str(self.server.get_uri(database))

    def new_database(self) -> str:
        """A new, empty database; returns its URL."""
        name = f"t{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name}")
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop_server(self) -> None:
        """Stop PostgreSQL now (fast: clients are disconnected mid-transaction)."""
        # pgserver makes its command wrappers at import time: mypy cannot see them.
        pg_ctl = _commands.pg_ctl  # type: ignore[attr-defined]
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=self.server.system_user)

    def start_server(self) -> None:
        """Start it again on the same directory and socket (the URLs stay valid)."""
        self.server.ensure_postgres_running()

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
            self._server = None


def database_of(url: str) -> str:
    """The database `url` names: a connection's `info.dbname`. A test that counts what
    is sent by patching a class keeps only its own database's: the worker's shared
    deployment (tests/support/deployment.py) runs its service in this process, on a
    database of its own, and its sweeps and publisher send through the same classes."""
    return str(conninfo_to_dict(url)["dbname"])


@contextlib.contextmanager
def _machine_lock() -> Iterator[None]:
    """A lock every test process on this machine shares (a file in the temp dir)."""
    path = Path(tempfile.gettempdir()) / "turnkeeper-tests-pgserver.lock"
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def replica(url: str) -> Iterator[PostgresDatabase]:
    """A PostgreSQL store on `url`, opened (migrated, its writer started), as one
    replica of the service has it; closed after."""
    db = PostgresDatabase(url, pool_size=2)
    db.open()
    try:
        yield db
    finally:
        db.close()


def writer_statements(monkeypatch: pytest.MonkeyPatch, url: str) -> list[str]:
    """The statements writers' connections are given from now on (BEGIN and COMMIT
    aside), on `url`'s database alone (`database_of`), in the order sent."""
    sent: list[str] = []
    real = SendingConnection.execute
    ours = database_of(url)

    def counted(self: SendingConnection, query: Any, params: Any = None, **kw: Any) -> Any:
        if self.info.dbname == ours:
            sent.append(str(query))
        return real(self, query, params, **kw)

    monkeypatch.setattr(SendingConnection, "execute", counted)
    return sent
