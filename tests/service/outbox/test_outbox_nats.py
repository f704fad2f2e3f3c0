"""NATS mirroring through the outbox: an outage loses nothing and doubles nothing."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeAlias

import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.store.records import OutboxRow

from tests.support.nats import NatsServer, subscribe
from tests.support.service import ServiceFactory
from tests.support.turns import events, start

pytestmark = [pytest.mark.both_backends, pytest.mark.unrenewed]

# The async stub type exists only in the generated .pyi (an aio channel makes one).
Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"


async def test_events_are_mirrored_with_their_outbox_id(
    service: TurnkeeperServer, turns: Stub
) -> None:
    assert service.settings.nats_url
    nc, got = await subscribe(service.settings.nats_url, "vystak.turn.events.>")
    try:
        await start(turns)
        await turns.AppendEvents(
            pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "token", "final"))
        )
        await turns.FinishTurn(
            pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE)
        )
        await got.wait_for(lambda: len(got.messages) == 3)
        subjects = {s for s, _, _ in got.messages}
        assert subjects == {"vystak.turn.events.t1"}
        assert [(m["seq"], m["type"]) for _, m, _ in got.messages] == [
            (1, "token"),
            (2, "final"),
            (3, "turn.done"),
        ]
        assert got.messages[0][1]["data"] == {"n": 1}
        assert all(msg_id.isdigit() for _, _, msg_id in got.messages)
        await asyncio.wait_for(service.outbox.wait_drained(), 10)
        assert service.outbox.backlog() == 0
    finally:
        await nc.close()


async def test_nats_outage_loses_nothing_and_publishes_each_outbox_id_once(
    nats_server: NatsServer, service: TurnkeeperServer, turns: Stub
) -> None:
    nc, got = await subscribe(nats_server.url, "vystak.turn.>")
    try:
        await start(turns, turn_id="before", thread_id="a")
        await turns.AppendEvents(
            pb.AppendEventsRequest(turn_id="before", attempt=0, events=events(1, "token"))
        )
        await got.wait_for(lambda: len(got.messages) == 1)
        # Received is not yet marked sent: the row leaves the outbox once NATS has
        # acknowledged it. Stop NATS only after that, or it is counted again below.
        await asyncio.wait_for(service.outbox.wait_drained(), 30)

        nats_server.stop()
        # While NATS is down every RPC still works; events and rewinds pile up.
        await turns.AppendEvents(
            pb.AppendEventsRequest(turn_id="before", attempt=0, events=events(2, "token", "token"))
        )
        for i in range(3):
            await start(turns, turn_id=f"t{i}", thread_id=f"th{i}")
            await turns.AppendEvents(
                pb.AppendEventsRequest(turn_id=f"t{i}", attempt=0, events=events(1, "token"))
            )
        redriven = await turns.Redrive(
            pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2")
        )
        assert len(redriven.turns) == 4
        for i in range(3):
            await turns.AppendEvents(
                pb.AppendEventsRequest(turn_id=f"t{i}", attempt=1, events=events(1, "token"))
            )
            await turns.FinishTurn(
                pb.FinishTurnRequest(turn_id=f"t{i}", attempt=1, outcome=pb.OUTCOME_DONE)
            )
        backlog = service.outbox.backlog()
        # 2 + (1 per turn, 3) + 4 rewinds + (2 per turn, 6) = 15 messages wait.
        assert backlog == 15

        nats_server.start()
        await got.wait_for(lambda: len(got.messages) == 16, timeout=20)
        await asyncio.wait_for(service.outbox.wait_drained(), 10)
        assert service.outbox.backlog() == 0
        ids = Counter(msg_id for _, _, msg_id in got.messages)
        assert all(n == 1 for n in ids.values()), ids
        assert len(got.on(".turn.rewind")) == 4
        # Order per turn is kept: t0's stream is token(1), rewind, token(1, attempt 1), turn.done.
        t0 = [
            (s.rsplit(".", 1)[-1], m.get("seq"), m.get("attempt"))
            for s, m, _ in got.messages
            if m.get("turn_id") == "t0"
        ]
        assert t0 == [("t0", 1, 0), ("rewind", 0, 1), ("t0", 1, 1), ("t0", 2, 1)]
    finally:
        await nc.close()


async def test_no_nats_configured_the_service_still_serves(
    make_service: ServiceFactory, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    with caplog.at_level(logging.WARNING):
        server = await make_service(nats_url=None)
    assert any("mirroring to NATS is off" in r.getMessage() for r in caplog.records)
    async with aio.insecure_channel(server.address) as ch:
        stub = turns_pb2_grpc.TurnServiceStub(ch)
        await start(stub)
        await stub.AppendEvents(
            pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "token"))
        )
        done = await stub.FinishTurn(
            pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE)
        )
        assert done.turn.state == pb.TURN_STATE_DONE


async def test_a_confirmed_outbox_row_is_handed_out_once_and_deleted_behind_it(
    make_service: ServiceFactory,
) -> None:
    """The store's drain, with the publisher off: rows it confirmed are never handed
    out again, even while their delete waits for the writer (SQLite), and rows whose
    publish failed are handed out again."""
    server = await make_service(nats_url=None)
    async with aio.insecure_channel(server.address) as ch:
        stub = turns_pb2_grpc.TurnServiceStub(ch)
        await start(stub)
        # One event a call: one outbox row each, on both backends.
        for seq in range(1, 5):
            await stub.AppendEvents(
                pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(seq, "token"))
            )
    db = server.db
    handed: list[list[int]] = []

    def publisher(ok: bool) -> Callable[[list[OutboxRow]], Awaitable[bool]]:
        async def publish(rows: list[OutboxRow]) -> bool:
            handed.append([row[0] for row in rows])
            return ok

        return publish

    assert db.outbox_backlog() == 4
    assert await db.drain_outbox(3, publisher(False)) == 0
    assert db.outbox_backlog() == 4
    assert await db.drain_outbox(3, publisher(True)) == 3
    assert db.outbox_backlog() == 1
    assert await db.drain_outbox(3, publisher(True)) == 1
    assert await db.drain_outbox(3, publisher(True)) == 0
    first = handed[0]
    assert handed == [first, first, [first[-1] + 1]]
    await db.write(lambda tx: None)  # behind the deletes, on a writer that queues
    assert db.read_conn().execute("SELECT count(*) FROM main.outbox").fetchone()[0] == 0


@pytest.mark.parametrize("msg_id", [1, 42, 10**12])
def test_outbox_frames_are_what_nats_py_publish_sends(msg_id: int) -> None:
    """nats_link builds a row's HPUB frames itself (cheaper than nc.publish per
    message): byte for byte what nc.publish(subject, payload, headers={"Nats-Msg-Id":
    id}) sends for each of them."""
    from nats.errors import MaxPayloadError
    from nats.protocol.command import hpub_cmd
    from turnkeeper_server.messaging.link import _hpub_frames

    subject = "vystak.turn.events.t1"
    payloads = ['{"seq":1,"data":"é"}'.encode(), b'{"seq":2}']
    expected = [
        hpub_cmd(subject, "", bytearray(b"NATS/1.0\r\nNats-Msg-Id: %d\r\n\r\n" % n), p)
        for n, p in enumerate(payloads, start=msg_id)
    ]
    row = list(enumerate(payloads, start=msg_id))
    assert _hpub_frames(subject, row, None, 1 << 20) == expected
    with pytest.raises(MaxPayloadError):
        _hpub_frames(subject, row, None, len(payloads[0]) - 1)
