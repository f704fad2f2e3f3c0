"""turns.db and sessions.db, with their -wal and -shm files, are owner-only (0600),
whatever the umask; --data-dir is created 0700."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper_server.config import resolve_paths
from turnkeeper_server.security.auth import TokenStore

from tests.support.security import write_tokens
from tests.support.service import ServiceFactory
from tests.support.turns import start

pytestmark = pytest.mark.timeout(60)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    # 000: anything not owner-only below comes from the code, not from a umask.
    old = os.umask(0)
    try:
        yield
    finally:
        os.umask(old)


async def test_databases_and_their_wal_and_shm_files_are_owner_only(
    make_service: ServiceFactory, tmp_path: Path, permissive_umask: None
) -> None:
    server = await make_service()
    async with aio.insecure_channel(server.address) as channel:
        await start(turns_pb2_grpc.TurnServiceStub(channel), "t1", "th1")
        await checkpoints_pb2_grpc.CheckpointServiceStub(channel).PutCheckpoint(
            # Another thread: th1's live turn takes only its own fenced writes.
            checkpoints_pb2.PutCheckpointRequest(
                thread_id="th2",
                checkpoint_id="c1",
                checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
                metadata_json="{}",
            )
        )
    files = [
        tmp_path / f"{db}{suffix}"
        for db in ("turns.db", "sessions.db")
        for suffix in ("", "-wal", "-shm")
    ]
    for path in files:
        assert path.exists(), f"{path.name} was not created (not in WAL mode?)"
    assert {p.name: oct(mode(p)) for p in files} == {p.name: "0o600" for p in files}


def test_data_dir_is_created_owner_only(tmp_path: Path, permissive_umask: None) -> None:
    turns, sessions = resolve_paths(tmp_path / "data")
    assert mode(tmp_path / "data") == 0o700
    assert (turns.parent, sessions.parent) == (tmp_path / "data", tmp_path / "data")


def test_a_tokens_file_others_can_write_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens.jsonl"
    write_tokens(path, {"admin": "admin"})
    with caplog.at_level(logging.WARNING, logger="turnkeeper_server.security.auth"):
        TokenStore.load(path)
    assert not caplog.records
    path.chmod(0o666)
    with caplog.at_level(logging.WARNING, logger="turnkeeper_server.security.auth"):
        TokenStore.load(path)
    assert any("writable by other users" in r.getMessage() for r in caplog.records)
