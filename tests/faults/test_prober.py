"""The prober's read-back after a round (`Prober.verify`) while the service cannot
read yet. After the round's PostgreSQL restart, the window ends at the prober's first
acknowledged write through one replica; the other may still be reconnecting its
pool, and the typed client's own retry of the read can end inside that. The full
PostgreSQL campaign once stopped there: `Unavailable: ListEvents` out of
`prober.verify`, a traceback where nothing acknowledged was lost. An UNAVAILABLE is
read again until the database is back, and one that never ends is a violation that
says so, not an exception that ends the campaign.

No service: a stand-in for the cluster's typed client, refusing as the service does.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, cast

import grpc
import pytest
from turnkeeper.errors import Unavailable
from turnkeeper.v1 import checkpoints_pb2, turns_pb2

from tests.faults import prober as prober_module
from tests.faults.checks import Checks
from tests.faults.cluster import Cluster
from tests.faults.prober import RESTARTING, Prober, ProbeRound

AWAY = "PostgreSQL at postgresql://127.0.0.1/db is unreachable: connection refused"


class Restarting:
    """The typed client of a cluster whose database is away for the first `refusals`
    reads (None: for good), then answers with what the probe wrote."""

    def __init__(self, probe: ProbeRound, refusals: int | None) -> None:
        self.probe = probe
        self.refusals = refusals
        self.reads = 0

    def _refuse(self, rpc: str) -> None:
        self.reads += 1
        if self.refusals is None or self.reads <= self.refusals:
            raise Unavailable(grpc.StatusCode.UNAVAILABLE, AWAY, rpc=rpc)

    async def list_events(self, request: turns_pb2.ListEventsRequest) -> Any:
        self._refuse("ListEvents")
        events = [
            turns_pb2.Event(seq=seq, type=type_, data_json=data)
            for seq, (type_, data) in sorted(self.probe.events.items())
            if seq > request.after_seq
        ]
        return turns_pb2.ListEventsResponse(events=events)

    async def get_checkpoint(self, request: checkpoints_pb2.GetCheckpointRequest) -> Any:
        self._refuse("GetCheckpoint")
        blob = self.probe.checkpoints[request.checkpoint_id]
        return checkpoints_pb2.GetCheckpointResponse(
            found=True,
            checkpoint=checkpoints_pb2.CheckpointTuple(
                checkpoint=checkpoints_pb2.TypedValue(type="bytes", data=blob)
            ),
        )


def probed(refusals: int | None) -> tuple[Prober, ProbeRound, Checks]:
    probe = ProbeRound("probe-r0", "probe-th-0", started=True)
    probe.events = {seq: ("probe", json.dumps({"round": 0, "n": seq})) for seq in range(1, 7)}
    probe.checkpoints = {"00000003": b"\x01" * 512}
    cluster = SimpleNamespace(backend="postgres", client=Restarting(probe, refusals))
    checks = Checks()
    return Prober(cast(Cluster, cluster), checks, seed=1), probe, checks


async def test_verify_reads_again_while_the_database_restarts_and_checks_every_write() -> None:
    # Refused longer than the client's own retry: three reads in a row, across the
    # events and the checkpoint.
    prober, probe, checks = probed(refusals=3)
    await prober.verify(probe)
    assert checks.violations == []
    assert (prober.events_checked, prober.checkpoints_checked) == (6, 1)
    assert checks.count == 7


async def test_a_database_that_never_comes_back_is_a_violation_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prober_module, "READ_PATIENCE", 0.0)
    prober, probe, checks = probed(refusals=None)
    await prober.verify(probe)
    (violation,) = checks.violations
    assert violation.startswith("prober ListEvents of probe-r0: UNAVAILABLE")
    assert RESTARTING in violation and AWAY in violation
    # Nothing was compared against a read that never came.
    assert prober.events_checked == 0
