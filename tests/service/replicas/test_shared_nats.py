"""Replicas of one PostgreSQL database must share one NATS: a replica that would start
its own bundled nats-server for a database refuses to start, and says what to pass
(decision 200). Two replicas each on their own bundled NATS hand turns to a NATS no
agent listens on, silently."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.postgres import PostgresCluster


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "NATS_"))}
    return subprocess.run(
        [sys.executable, "-m", "turnkeeper_server", "--listen", "127.0.0.1:0", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_database_replica_without_a_nats_url_refuses_the_bundled_nats(
    postgres_cluster: PostgresCluster,
) -> None:
    done = serve("--database-url", postgres_cluster.new_database(), "--http-port", "-1")
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--nats-url" in done.stderr
    assert "share one NATS" in done.stderr
    assert "listening" not in done.stdout


def test_the_database_url_from_the_environment_is_refused_the_same_way(
    postgres_cluster: PostgresCluster,
) -> None:
    done = serve(
        "--http-port", "-1", env={"TURNKEEPER_DATABASE_URL": postgres_cluster.new_database()}
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--nats-url" in done.stderr
