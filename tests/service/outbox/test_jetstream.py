"""JetStream for the mirrored subjects (``--jetstream``), against a real nats-server
started with ``-js``: the service makes sure the stream exists, three replicas'
outboxes put every row in it once (a re-published row is dropped by its
Nats-Msg-Id), and a consumer that comes after the turn ended replays its events."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from grpc import aio
from nats.aio.client import Client
from nats.js.api import DeliverPolicy, StreamConfig
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.messaging.jetstream import (
    JetStreamUnavailable,
    StreamSpec,
    ensure_stream,
    stream_name,
)
from turnkeeper_server.store.records import OutboxRow

from tests.support.nats import NatsServer
from tests.support.postgres import PostgresCluster
from tests.support.service import ServiceFactory, unrenewed
from tests.support.turns import start

STREAM = stream_name("vystak")


@pytest.fixture
def js_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(jetstream=True, store_dir=tmp_path / "js")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def nc(js_server: NatsServer) -> AsyncIterator[Client]:
    client = await nats.connect(js_server.url)
    try:
        yield client
    finally:
        await client.close()


async def append(stub: turns_pb2_grpc.TurnServiceAsyncStub, turn_id: str, seq: int) -> None:
    await stub.AppendEvents(
        pb.AppendEventsRequest(
            turn_id=turn_id,
            attempt=0,
            events=[pb.EventInput(seq=seq, type="token", data_json=f'{{"n":{seq}}}')],
        )
    )


async def stored(nc: Client, subject: str, count: int) -> list[tuple[str, dict[str, object], str]]:
    """The first ``count`` messages the stream holds on ``subject``, waiting for them
    (the stream stores a message shortly after the server read it): (subject,
    payload, Nats-Msg-Id)."""
    js = nc.jetstream()
    sub = await js.subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    try:
        got = []
        for _ in range(count):
            msg = await sub.next_msg(timeout=20)
            got.append(
                (msg.subject, json.loads(msg.data), (msg.headers or {}).get("Nats-Msg-Id", ""))
            )
        return got
    finally:
        await sub.unsubscribe()


async def messages_in_stream(nc: Client) -> int:
    return (await nc.jetstream().stream_info(STREAM)).state.messages


async def test_three_replicas_put_every_outbox_row_in_the_stream_exactly_once(
    js_server: NatsServer,
    nc: Client,
    make_service: ServiceFactory,
    postgres_cluster: PostgresCluster,
) -> None:
    database = postgres_cluster.new_database()
    # No agent holds these turns' leases: the 300 appends are the test's (a 2 s
    # lease was re-driven away between two of them under load 17).
    replicas = [
        await make_service(
            database_url=database, nats_url=js_server.url, jetstream=True, **unrenewed()
        )
        for _ in range(3)
    ]
    channels = [aio.insecure_channel(r.address) for r in replicas]
    stubs = [turns_pb2_grpc.TurnServiceStub(ch) for ch in channels]
    try:

        async def turn(i: int) -> None:
            await start(stubs[i % 3], turn_id=f"t{i}", thread_id=f"th{i}")
            for seq in range(1, 11):
                await append(stubs[(i + seq) % 3], f"t{i}", seq)

        await asyncio.gather(*(turn(i) for i in range(30)))
        for replica in replicas:
            await asyncio.wait_for(replica.outbox.wait_drained(), 20)
    finally:
        for ch in channels:
            await ch.close(None)

    got = await stored(nc, "vystak.turn.events.>", 300)
    assert await messages_in_stream(nc) == 300
    arrived = Counter((m["turn_id"], m["seq"]) for _, m, _ in got)
    assert set(arrived) == {(f"t{i}", seq) for i in range(30) for seq in range(1, 11)}
    assert max(arrived.values()) == 1
    ids = [msg_id for _, _, msg_id in got]
    assert len(set(ids)) == len(ids) == 300
    assert all(r.outbox.published > 0 for r in replicas)

    # The duplicate the outbox can make: a batch published again after a connection
    # loss hid that it arrived. The stream drops it by its Nats-Msg-Id.
    again = [
        OutboxRow(int(msg_id), subject, json.dumps(m).encode(), None, 1)
        for subject, m, msg_id in got[:20]
    ]
    assert await replicas[1].link.publish_batch(again)
    # A marker published after them: once the stream holds it, it has dealt with
    # the twenty before it (one stream stores in order).
    await nc.publish("vystak.turn.marker", b"{}")
    await stored(nc, "vystak.turn.marker", 1)
    info = await nc.jetstream().stream_info(STREAM)
    assert info.state.messages == 301
    assert info.config.duplicate_window == 300.0


async def test_a_late_consumer_replays_a_finished_turns_events(
    js_server: NatsServer, nc: Client, make_service: ServiceFactory
) -> None:
    service = await make_service(nats_url=js_server.url, jetstream=True)
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await start(stub, turn_id="t1", thread_id="th1")
        for seq in range(1, 6):
            await append(stub, "t1", seq)
        await stub.FinishTurn(
            pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE)
        )
        await asyncio.wait_for(service.outbox.wait_drained(), 20)

    # Subscribed only now, after the turn ended: the stream still has all of it.
    got = await stored(nc, "vystak.turn.events.t1", 6)
    assert await messages_in_stream(nc) == 6
    assert [(m["seq"], m["type"]) for _, m, _ in got] == [(n, "token") for n in range(1, 6)] + [
        (6, "turn.done")
    ]


async def test_an_existing_stream_is_widened_not_replaced(nc: Client) -> None:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=STREAM, subjects=["audit.>"], duplicate_window=10))
    await ensure_stream(nc, StreamSpec("vystak"))
    # A second replica finds it as it needs it.
    await ensure_stream(nc, StreamSpec("vystak"))
    config = (await js.stream_info(STREAM)).config
    assert sorted(config.subjects or []) == ["audit.>", "vystak.turn.>"]
    assert config.duplicate_window == 300.0


async def test_a_nats_server_without_jetstream_is_named_with_the_fix(
    nats_server: NatsServer,
) -> None:
    client = await nats.connect(nats_server.url)
    try:
        with pytest.raises(JetStreamUnavailable, match="start nats-server with -js"):
            await ensure_stream(client, StreamSpec("vystak"))
    finally:
        await client.close()


def test_a_duplicate_window_that_is_not_positive_is_refused() -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        StreamSpec("vystak", 0)
