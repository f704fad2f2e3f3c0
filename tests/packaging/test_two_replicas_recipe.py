"""docs/two-replicas.md's commands, run as written against a throwaway PostgreSQL and
a nats-server with JetStream: two replicas of one database share one NATS, and a turn
started through one is the other's (decision 206). The page's `export` lines are the
reader's settings; the test gives its own database and NATS in the environment, and
free ports for the page's fixed ones (as tests/packaging/test_readme_commands.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.packaging.test_readme_commands import (
    Background,
    bash,
    block,
    blocks,
    free_port,
    same_output,
)
from tests.support.nats import NatsServer
from tests.support.postgres import PostgresCluster

PAGE = "docs/two-replicas.md"
EXPORTS = "export TURNKEEPER_DATABASE_URL=postgresql://turnkeeper@db.internal:5432/turnkeeper"
SERVE = "turnkeeper serve --jetstream --listen 127.0.0.1:50051 --http-port 50080 &"
CHECK = """grpcurl -plaintext -d '{"turn_id":"t1","thread_id":"th1","agent":"a","replica":"r1","incarnation":"i1"}' \\"""


def test_the_page_has_the_blocks_this_test_runs() -> None:
    assert [b.first_line for b in blocks(PAGE)] == [EXPORTS, SERVE, CHECK]


@pytest.mark.slow
def test_two_replicas_of_one_database_share_one_nats_and_their_turns(
    postgres_cluster: PostgresCluster, tmp_path: Path
) -> None:
    nats = NatsServer(jetstream=True, store_dir=tmp_path / "js")
    nats.start()
    ports = {p: str(free_port()) for p in ("50051", "50052", "50080", "50081")}

    def ported(text: str) -> str:
        for fixed, free in ports.items():
            text = text.replace(fixed, free)
        return text

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "NATS_"))},
        "TURNKEEPER_DATABASE_URL": postgres_cluster.new_database(),
        "TURNKEEPER_NATS_URL": nats.url,
        "no_proxy": "127.0.0.1,localhost",
        "no_grpc_proxy": "127.0.0.1,localhost",
    }
    # A terminal keeps what it started with `&`; the script waits for them likewise.
    replicas = Background.start(ported(block(PAGE, SERVE).text) + "wait\n", tmp_path, env)
    try:
        for port in (ports["50051"], ports["50052"]):
            replicas.wait_for(rf"^turnkeeper listening on 127\.0\.0\.1:{port}$", 60)
        check = block(PAGE, CHECK)
        assert check.output is not None
        shown = bash(ported(check.text), tmp_path, env, 60)
        assert same_output(shown, check.output), shown
    finally:
        replicas.stop()
        nats.stop()
