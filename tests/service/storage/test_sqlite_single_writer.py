"""No two services on one pair of SQLite files: the second refuses to start, names
the process that holds them, and writes nothing; once the first dies (even by
SIGKILL) the files can be served again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc

from tests.support.procs import ServiceProcess
from tests.support.turns import start

pytestmark = pytest.mark.slow


def serve_once(data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "turnkeeper_server",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            str(data_dir),
            "--no-nats",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_second_service_on_the_same_files_is_refused(tmp_path: Path) -> None:
    first = ServiceProcess(tmp_path)
    address = first.start()
    try:
        async with aio.insecure_channel(address) as ch:
            await start(turns_pb2_grpc.TurnServiceStub(ch), turn_id="t1")
        assert first.process is not None
        before = (tmp_path / "turns.db").stat().st_mtime_ns

        second = serve_once(tmp_path)

        assert second.returncode == 2
        output = second.stdout + second.stderr
        assert "in use by another turnkeeper process" in output
        assert f"pid {first.process.pid}" in output
        assert "turnkeeper listening" not in output
        assert (tmp_path / "turns.db").stat().st_mtime_ns == before
        # The first one is untouched and still serves.
        async with aio.insecure_channel(address) as ch:
            got = await turns_pb2_grpc.TurnServiceStub(ch).TurnStatus(
                pb.TurnStatusRequest(turn_id="t1")
            )
        assert got.state == pb.TURN_STATE_RUNNING
    finally:
        first.kill()

    # SIGKILL ran no shutdown code, yet the kernel dropped the lock with the process.
    after = ServiceProcess(tmp_path)
    address = after.start()
    try:
        async with aio.insecure_channel(address) as ch:
            got = await turns_pb2_grpc.TurnServiceStub(ch).TurnStatus(
                pb.TurnStatusRequest(turn_id="t1")
            )
        assert got.state == pb.TURN_STATE_RUNNING
    finally:
        after.kill()
