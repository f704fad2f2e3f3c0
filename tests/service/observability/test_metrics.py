"""Metrics scraped from the real Prometheus endpoint, and the turn log lines.

The scripted turns use the gRPC API as an agent's bridge would: StartTurn,
AppendEvents, a checkpoint, the startup form of Redrive after a "restart", and
FinishTurn; a second turn is re-driven by an operator until it fails at the cap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import grpc
import pytest
from grpc import aio
from prometheus_client.parser import text_string_to_metric_families
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.logs import JsonFormatter, turn_log
from turnkeeper_server.store.contract import Tx

from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory, expect_code, unrenewed
from tests.support.turns import events, start

if TYPE_CHECKING:
    from turnkeeper.v1.checkpoints_pb2_grpc import CheckpointServiceAsyncStub
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
CHECKPOINT = b'{"v":1,"channel_values":{"messages":["hi"]}}'


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


async def scrape_when(port: int, ready: str, value: float) -> Samples:
    """Scrape until `ready` (a sample without labels) reaches `value`."""
    for _ in range(250):
        samples = await asyncio.to_thread(scrape, port)
        if sample(samples, ready) == value:
            return samples
        await asyncio.sleep(0.02)
    raise AssertionError(f"{ready} never reached {value}")


@pytest.fixture
async def metered(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    # Long leases: the lease reaper must not re-drive anything behind the script's back.
    return await make_service(
        nats_url=nats_server.url,
        metrics_listen="127.0.0.1:0",
        max_redrives=1,
        **unrenewed(claims=True),
    )


@pytest.fixture
async def stubs(
    metered: TurnkeeperServer,
) -> AsyncIterator[tuple[TurnServiceAsyncStub, CheckpointServiceAsyncStub]]:
    async with aio.insecure_channel(metered.address) as channel:
        yield (
            turns_pb2_grpc.TurnServiceStub(channel),
            checkpoints_pb2_grpc.CheckpointServiceStub(channel),
        )


async def scripted_turns(
    turns: TurnServiceAsyncStub, checkpoints: CheckpointServiceAsyncStub
) -> None:
    # a1: two events, a checkpoint (boundary seq 2), one more event, then the agent
    # process restarts: its startup Redrive rewinds a1 to seq 2 and hands it back.
    await start(turns, "a1", "th1", "agent", replica="r1", incarnation="i1")
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="a1", attempt=0, events=events(1, "token", "step"))
    )
    await checkpoints.PutCheckpoint(
        cpb.PutCheckpointRequest(
            thread_id="th1",
            checkpoint_id="c1",
            checkpoint=cpb.TypedValue(type="json", data=CHECKPOINT),
            fence=cpb.TurnFence(turn_id="a1", attempt=0),
        )
    )
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="a1", attempt=0, events=events(3, "tool_call_start"))
    )
    redriven = await turns.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
    assert [(r.turn.attempts, r.rewind_seq, r.checkpoint_id) for r in redriven.turns] == [
        (1, 2, "c1")
    ]
    await turns.AppendEvents(
        pb.AppendEventsRequest(turn_id="a1", attempt=1, events=events(3, "tool_call_start"))
    )
    await turns.FinishTurn(pb.FinishTurnRequest(turn_id="a1", attempt=1, outcome=pb.OUTCOME_DONE))

    # b1: an operator re-drives it once (a rewind), and again at the cap of 1: FAILED.
    await start(turns, "b1", "th2", "agent", replica="r1", incarnation="i2")
    once = await turns.Redrive(pb.RedriveRequest(turn_id="b1", force=True))
    assert not once.turns[0].failed_at_cap
    twice = await turns.Redrive(pb.RedriveRequest(turn_id="b1", force=True))
    assert twice.turns[0].failed_at_cap


@pytest.mark.both_backends
async def test_scraped_counts_after_a_turn_with_a_redrive(
    metered: TurnkeeperServer,
    stubs: tuple[TurnServiceAsyncStub, CheckpointServiceAsyncStub],
    backend: str,
) -> None:
    turns, checkpoints = stubs
    await scripted_turns(turns, checkpoints)
    await expect_code(turns.GetTurn(pb.GetTurnRequest(turn_id="nope")), grpc.StatusCode.NOT_FOUND)

    # 4 events + turn.done + turn.failed + 2 rewinds went through the outbox.
    await scrape_when(metered.metrics_port, "turnkeeper_outbox_published_total", 8)
    # On SQLite a published row's delete joins the writer's next group commit, and the
    # backlog counts it until then (decision 153): it drains, and nothing more is sent.
    s = await scrape_when(metered.metrics_port, "turnkeeper_outbox_backlog", 0)
    assert sample(s, "turnkeeper_outbox_published_total") == 8
    assert sample(s, "turnkeeper_outbox_publish_failures_total") == 0

    assert sample(s, "turnkeeper_turns", state="DONE") == 1
    assert sample(s, "turnkeeper_turns", state="FAILED") == 1
    assert sample(s, "turnkeeper_turns", state="RUNNING") == 0
    assert sample(s, "turnkeeper_turns", state="PARKED") == 0
    assert sample(s, "turnkeeper_turns_started_total") == 2
    assert sample(s, "turnkeeper_turns_finished_total", state="DONE") == 1

    assert sample(s, "turnkeeper_redrives_total", trigger="startup") == 1
    assert sample(s, "turnkeeper_redrives_total", trigger="operator") == 1
    assert sample(s, "turnkeeper_redrives_total", trigger="lease") == 0
    assert sample(s, "turnkeeper_rewinds_total") == 2
    assert sample(s, "turnkeeper_turns_failed_at_cap_total") == 1
    assert sample(s, "turnkeeper_events_appended_total") == 4

    assert sample(s, "turnkeeper_checkpoint_bytes_total") == len(CHECKPOINT)
    if backend == "sqlite":  # file sizes: PostgreSQL has its own monitoring for that
        assert sample(s, "turnkeeper_db_bytes", file="turns") > 0
        assert sample(s, "turnkeeper_db_bytes", file="sessions") > 0

    assert sample(s, "turnkeeper_rpcs_total", method="StartTurn", code="OK") == 2
    assert sample(s, "turnkeeper_rpcs_total", method="AppendEvents", code="OK") == 3
    assert sample(s, "turnkeeper_rpcs_total", method="Redrive", code="OK") == 3
    assert sample(s, "turnkeeper_rpcs_total", method="GetTurn", code="NOT_FOUND") == 1
    assert sample(s, "turnkeeper_rpc_seconds_count", method="Redrive", code="OK") == 3
    assert sample(s, "turnkeeper_rpc_seconds_count", method="GetTurn", code="NOT_FOUND") == 1
    assert (
        sample(s, "turnkeeper_rpc_seconds_bucket", method="FinishTurn", code="OK", le="+Inf") == 1
    )


async def test_outbox_publish_failures_are_counted(
    metered: TurnkeeperServer, stubs: tuple[TurnServiceAsyncStub, CheckpointServiceAsyncStub]
) -> None:
    # A message larger than the NATS server's max_payload (1 MiB by default) is
    # refused by the client library: the batch fails and stays in the outbox.
    def oversized(tx: Tx) -> None:
        tx.execute(
            "INSERT INTO main.outbox (subject, payload, created_at) VALUES (?, ?, 0)",
            ("vystak.turn.events.big", b"x" * (2 << 20)),
        )

    await metered.db.write(oversized)
    metered.outbox.wake()
    for _ in range(250):
        s = await asyncio.to_thread(scrape, metered.metrics_port)
        if sample(s, "turnkeeper_outbox_publish_failures_total") >= 1:
            break
        await asyncio.sleep(0.02)
    else:
        raise AssertionError("the failed publish was never counted")
    assert sample(s, "turnkeeper_outbox_backlog") == 1
    assert sample(s, "turnkeeper_outbox_published_total") == 0


async def test_every_log_line_about_a_turn_names_it_and_its_attempt(
    metered: TurnkeeperServer,
    stubs: tuple[TurnServiceAsyncStub, CheckpointServiceAsyncStub],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="turnkeeper_server")
    await scripted_turns(*stubs)
    about_turns = [r for r in caplog.records if r.name == "turnkeeper_server.engine"]
    assert about_turns
    for record in about_turns:
        turn_id, attempt = getattr(record, "turn_id", None), getattr(record, "attempt", None)
        assert turn_id in ("a1", "b1"), record.getMessage()
        assert isinstance(attempt, int)
        assert record.getMessage().startswith(f"turn_id={turn_id} attempt={attempt} ")
    lines = [r.getMessage() for r in about_turns]
    assert "turn_id=a1 attempt=1 re-driven (startup): rewound to seq 2, checkpoint c1" in lines
    assert "turn_id=a1 attempt=1 finished DONE at seq 4" in lines
    assert "turn_id=b1 attempt=1 orphaned (operator) at the re-drive cap of 1: FAILED" in lines


def test_json_log_lines_carry_turn_id_and_attempt_as_fields() -> None:
    logger = logging.getLogger("tests.turn")
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        turn_log(logger, "t-1", 2).info("parked at seq %d", 7)
        logger.info("not about a turn")
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    about, other = (json.loads(JsonFormatter().format(r)) for r in records)
    assert about["msg"] == "parked at seq 7"
    assert (about["turn_id"], about["attempt"], about["level"]) == ("t-1", 2, "INFO")
    assert about["logger"] == "tests.turn"
    assert about["ts"].endswith("Z")
    assert other["msg"] == "not about a turn"
    assert "turn_id" not in other
