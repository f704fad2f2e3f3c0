"""The service freezes what startup allocated out of the cyclic collector (decision
156), and `--no-gc-freeze` / TURNKEEPER_GC_FREEZE=0 leave it in; either way it serves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2_grpc

from tests.support.procs import ServiceProcess
from tests.support.turns import start

_FROZEN = re.compile(r"(\d+) objects from startup frozen out of the cyclic garbage collector")


def _frozen(log: list[str]) -> int | None:
    for line in log:
        if match := _FROZEN.search(line):
            return int(match.group(1))
    return None


@pytest.mark.parametrize(
    ("extra", "env", "frozen"),
    [
        ([], {}, True),
        (["--no-gc-freeze"], {}, False),
        ([], {"TURNKEEPER_GC_FREEZE": "0"}, False),
    ],
    ids=["default", "flag", "env"],
)
async def test_startup_objects_are_frozen_unless_turned_off(
    tmp_path: Path, extra: list[str], env: dict[str, str], frozen: bool
) -> None:
    proc = ServiceProcess(tmp_path, extra=extra, env=env)
    address = proc.start()
    try:
        async with aio.insecure_channel(address) as channel:
            await start(turns_pb2_grpc.TurnServiceStub(channel))
        count = _frozen(proc.log)
        if frozen:
            # Startup imports grpc, protobuf and the stores: far more than a handful.
            assert count is not None and count > 10_000, proc.log
        else:
            assert count is None, proc.log
    finally:
        assert proc.terminate() == 0
