"""The service runs on grpc's iomgr engine unless its operator chose otherwise
(turnkeeper/_io_engine.py): set before grpc loads, checked in a real service process
by the endpoint grpc's own trace says carried a call."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from turnkeeper._io_engine import IOMGR, describe, prefer_iomgr

from tests.support.procs import ServiceProcess

# grpc's tcp trace names the endpoint that moved the bytes: iomgr's is tcp_posix.cc,
# EventEngine's (event_engine/posix_engine/) is posix_endpoint.cc.
_TRACED = {"GRPC_TRACE": "tcp", "GRPC_VERBOSITY": "debug"}


# Both ways to start the service: its module (and `turnkeeper-server`), and the
# `turnkeeper` command's `serve` (the quick start's, and the image's entrypoint).
COMMANDS = {
    "python -m turnkeeper_server": ("-m", "turnkeeper_server"),
    "turnkeeper serve": ("-m", "turnkeeper.operator", "serve"),
}


def _endpoints(tmp_path: Path, env: dict[str, str], command: str) -> tuple[set[str], str]:
    """The source files grpc's tcp trace names once the service has answered a call,
    and the service's log."""
    service = ServiceProcess(tmp_path, env={**_TRACED, **env}, command=COMMANDS[command])
    service.start()
    try:
        with grpc.insecure_channel(service.address) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        service.terminate()
    files = {m.group(1) for line in service.log if (m := re.search(r"(\w+)\.cc:\d+\]", line))}
    return files, "\n".join(service.log)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_service_runs_on_iomgr_by_default(tmp_path: Path, command: str) -> None:
    files, log = _endpoints(tmp_path, {}, command)
    assert "tcp_posix" in files and "posix_endpoint" not in files and "endpoint" not in files
    assert f"grpc I/O engine: iomgr (GRPC_EXPERIMENTS={IOMGR})" in log


def test_an_operator_who_sets_grpc_experiments_gets_grpcs_own_choice(tmp_path: Path) -> None:
    # The empty string is grpc's defaults: EventEngine on this grpcio.
    files, log = _endpoints(tmp_path, {"GRPC_EXPERIMENTS": ""}, "python -m turnkeeper_server")
    assert "grpc I/O engine: as GRPC_EXPERIMENTS='' says" in log
    assert "tcp_posix" not in files and files & {"posix_endpoint", "endpoint"}


def test_prefer_iomgr_sets_the_experiments_only_where_nobody_chose() -> None:
    # The test process has grpc loaded already: too late, nothing is set.
    environ: dict[str, str] = {}
    assert prefer_iomgr(environ) is False and environ == {}

    chosen = {"GRPC_EXPERIMENTS": ""}
    assert prefer_iomgr(chosen, grpcio="1.85.3") is False
    assert chosen == {"GRPC_EXPERIMENTS": ""}
    assert describe({}) == "grpc's default (GRPC_EXPERIMENTS unset)"


@pytest.mark.parametrize(
    ("version", "applies"),
    [("1.79.0", False), ("1.80.0", True), ("1.85.3", True), ("1.86.0", False), ("2", False)],
)
def test_prefer_iomgr_applies_on_the_grpcio_it_was_measured_on(
    version: str, applies: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As in a process that has not loaded grpc yet.
    monkeypatch.delitem(sys.modules, "grpc")
    environ: dict[str, str] = {}
    assert prefer_iomgr(environ, grpcio=version) is applies
    assert environ == ({"GRPC_EXPERIMENTS": IOMGR} if applies else {})
