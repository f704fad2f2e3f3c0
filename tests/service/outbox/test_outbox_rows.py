"""A batch's messages in one outbox row (SQLite), each keeping an outbox id of its own."""

from __future__ import annotations

import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.store.contract import Tx
from turnkeeper_server.store.outbox_rows import SEPARATOR, messages, write_messages
from turnkeeper_server.store.records import OutboxRow

from tests.support.nats import subscribe
from tests.support.service import ServiceFactory
from tests.support.turns import events, start

pytestmark = pytest.mark.both_backends


def _rows(server: TurnkeeperServer) -> list[tuple[int, int]]:
    """(id, messages) of every outbox row, in id order."""
    rows = server.db.read_conn().execute("SELECT id, messages FROM outbox ORDER BY id").fetchall()
    return [(int(r[0]), int(r[1])) for r in rows]


async def _append(server: TurnkeeperServer, first: int, count: int) -> None:
    async with aio.insecure_channel(server.address) as ch:
        stub = turns_pb2_grpc.TurnServiceStub(ch)
        if first == 1:
            await start(stub)
        await stub.AppendEvents(
            pb.AppendEventsRequest(
                turn_id="t1", attempt=0, events=events(first, *["token"] * count)
            )
        )


@pytest.fixture
async def two_batches(make_service: ServiceFactory) -> TurnkeeperServer:
    """A service with NATS off (the outbox keeps its rows) and turn t1's events 1-5
    and 6-8 appended as two batches."""
    server = await make_service(nats_url=None)
    await _append(server, 1, 5)
    await _append(server, 6, 3)
    return server


async def test_a_batch_takes_one_row_on_sqlite_and_a_row_a_message_on_postgres(
    two_batches: TurnkeeperServer,
) -> None:
    server = two_batches
    rows = _rows(server)
    if server.db.kind == "sqlite":
        # Each row's id is the last of its run; the runs follow each other.
        first = rows[0][0] - 4
        assert rows == [(first + 4, 5), (first + 7, 3)]
    else:
        assert [n for _, n in rows] == [1] * 8
    assert server.db.outbox_backlog() == 8


async def test_every_message_of_a_row_is_handed_out_with_its_own_id_in_seq_order(
    two_batches: TurnkeeperServer,
) -> None:
    server = two_batches
    handed: list[OutboxRow] = []

    async def publish(rows: list[OutboxRow]) -> bool:
        handed.extend(rows)
        return True

    # A limit of 2 messages: one whole row of 5 on SQLite (a row is never split).
    first_take = await server.db.drain_outbox(2, publish)
    assert first_take == (5 if server.db.kind == "sqlite" else 2)
    while await server.db.drain_outbox(2, publish):
        pass
    assert server.db.outbox_backlog() == 0
    sent = [(msg_id, payload) for row in handed for msg_id, payload in messages(row)]
    ids = [msg_id for msg_id, _ in sent]
    assert ids == list(range(ids[0], ids[0] + 8))
    assert [b'"seq":%d,' % seq in payload for seq, (_, payload) in enumerate(sent, 1)] == [True] * 8

    # Published rows are deleted; the next batch's ids still come after theirs, never
    # reused (JetStream would drop a reused id as a duplicate).
    await server.db.write(lambda tx: None)  # behind the deletes, on a writer that queues
    await _append(server, 9, 2)
    assert min(msg_id for row in _drained(server) for msg_id, _ in messages(row)) > ids[-1]


def _drained(server: TurnkeeperServer) -> list[OutboxRow]:
    rows = (
        server.db.read_conn()
        .execute("SELECT id, subject, payload, traceparent, messages FROM outbox ORDER BY id")
        .fetchall()
    )
    return [OutboxRow(int(r[0]), str(r[1]), bytes(r[2]), r[3], int(r[4])) for r in rows]


async def test_a_payload_holding_the_separator_goes_one_row_a_message(
    make_service: ServiceFactory,
) -> None:
    server = await make_service(nats_url=None)
    payloads = [b'{"a":1}', b"not json \x1e at all", b'{"c":3}']

    def write(tx: Tx) -> None:
        write_messages(tx, "vystak.turn.events.x", payloads, 0.0)

    await server.db.write(write)
    rows = _drained(server)
    assert [r[4] for r in rows] == [1, 1, 1]
    assert [p for row in rows for _, p in messages(row)] == payloads


def test_a_row_whose_payload_does_not_split_into_its_count_is_refused() -> None:
    row = OutboxRow(10, "s", SEPARATOR.join([b"{}", b"{}"]), None, 3)
    with pytest.raises(ValueError, match="holds 2 messages, not 3"):
        list(messages(row))


async def test_nats_gets_a_batch_as_one_message_an_event_with_consecutive_ids(
    service: TurnkeeperServer,
) -> None:
    assert service.settings.nats_url
    nc, got = await subscribe(service.settings.nats_url, "vystak.turn.events.>")
    try:
        await _append(service, 1, 6)
        async with aio.insecure_channel(service.address) as ch:
            await turns_pb2_grpc.TurnServiceStub(ch).FinishTurn(
                pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE)
            )
        await got.wait_for(lambda: len(got.messages) == 7)
        assert [m["seq"] for _, m, _ in got.messages] == list(range(1, 8))
        ids = [int(msg_id) for _, _, msg_id in got.messages]
        assert ids == list(range(ids[0], ids[0] + 7))
    finally:
        await nc.close()
