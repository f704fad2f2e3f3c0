"""The outbox keeps draining after a NATS restart (decisions 500 and 501).

Found by tests/faults (the reduced SQLite campaign, about one run in three on a
busy machine): a batch whose flush was waiting when the NATS restart cut its
connection failed two seconds later, at its flush timeout, and its failure dropped
the link's *new* connection to the restarted server, just as the publisher (woken
by the writes meanwhile) started its next batch on it. That batch failed the same
way two seconds later, and so on while anything was written: the outbox held its
rows with NATS up until the service restarted.

The relay (tests/support/relay.py) holds what the service sends, so that a flush
is known to be waiting when the connection is cut.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from grpc import aio
from nats.aio.client import Client
from nats.errors import FlushTimeoutError
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.messaging.link import CANCEL_METHOD, NatsLink
from turnkeeper_server.messaging.outbox import OutboxPublisher
from turnkeeper_server.store.records import OutboxRow

from tests.support.nats import NatsServer, subscribe
from tests.support.relay import Relay
from tests.support.service import ServiceFactory
from tests.support.turns import events, start

pytestmark = pytest.mark.timeout(60)

SUBJECT = "vystak.turn.events.t1"


def rows(first: int, last: int) -> list[OutboxRow]:
    return [
        OutboxRow(i, SUBJECT, json.dumps({"seq": i}).encode(), None, 1)
        for i in range(first, last + 1)
    ]


class Dialled:
    """The connections a link made, in order, and an event for the next one."""

    def __init__(self, link: NatsLink) -> None:
        self.connections: list[Client] = []
        self._new = asyncio.Event()
        link.on_connect.append(self._connected)

    async def _connected(self, nc: Client) -> None:
        self.connections.append(nc)
        self._new.set()

    async def count(self, n: int) -> Client:
        """Until the link has made `n` connections; the n-th."""
        while len(self.connections) < n:
            self._new.clear()
            await self._new.wait()
        return self.connections[n - 1]


@pytest.fixture
async def relay(nats_server: NatsServer) -> AsyncIterator[Relay]:
    relay = Relay(nats_server.port)
    await relay.start()
    yield relay
    await relay.stop()


@pytest.fixture
async def link(relay: Relay) -> AsyncIterator[NatsLink]:
    link = NatsLink(relay.url)
    yield link
    await link.stop()


async def test_a_batch_cut_off_by_a_nats_restart_does_not_drop_the_next_connection(
    nats_server: NatsServer, relay: Relay, link: NatsLink
) -> None:
    dialled = Dialled(link)
    await link.start()
    first = await dialled.count(1)
    relay.hold()
    publishing = asyncio.create_task(link.publish_batch(rows(1, 3)))
    await relay.holding.wait()  # the batch and its PING are held: its flush waits
    relay.shut()  # NATS restarts under the flush
    nats_server.kill()
    nats_server.start()
    relay.open()
    second = await dialled.count(2)
    assert second is not first
    assert not await publishing, "a batch the server never read was confirmed"
    # The cut batch's failure concerns its own connection, not the one made since.
    assert link.client is second
    nc, got = await subscribe(nats_server.url, "vystak.turn.>")
    try:
        assert await link.publish_batch(rows(1, 3))
        await got.wait_for(lambda: len(got.messages) >= 3)
        assert [int(msg_id) for _, _, msg_id in got.messages] == [1, 2, 3]
    finally:
        await nc.close()
    assert len(dialled.connections) == 2


async def test_a_connection_whose_flush_timed_out_is_not_used_again(
    relay: Relay, link: NatsLink
) -> None:
    dialled = Dialled(link)
    await link.start()
    first = await dialled.count(1)
    relay.hold()
    # A cancel's flush gets no PONG within its timeout (two seconds).
    assert not await link.notify("vystak.default.agents.a.control", CANCEL_METHOD, {})
    # Its PONG may still come: nats-py would then stop reading the connection.
    assert link.client is not first
    relay.release()
    assert await dialled.count(2) is not first


async def test_no_batch_is_confirmed_on_a_connection_nats_py_no_longer_reads(
    relay: Relay, link: NatsLink
) -> None:
    await link.start()
    assert await link.wait_connected(10)
    nc = link.client
    assert nc is not None
    relay.hold()
    with pytest.raises(FlushTimeoutError):
        await nc.flush(timeout=0.2)  # type: ignore[arg-type]  # seconds, typed int
    relay.release()
    # nats-py (2.16) answers the late PONG's cancelled future with InvalidStateError
    # and its reader ends, the connection still open: its flush() then returns at
    # once, without a PING.
    # (A nats-py that kept reading would hang here: decision 501's premise is gone.)
    reader = nc._reading_task
    assert reader is not None
    await reader
    assert nc.is_connected
    relay.hold()
    assert not await link.publish_batch(rows(1, 3)), (
        "confirmed a batch that the relay held back from the server"
    )


@pytest.mark.both_backends
# The turn's appends are the test's, across a NATS restart: no agent renews its lease.
@pytest.mark.unrenewed
async def test_the_outbox_keeps_draining_after_a_nats_restart_while_turns_write(
    make_service: ServiceFactory, nats_server: NatsServer, relay: Relay
) -> None:
    service = await make_service(nats_url=relay.url)
    assert await service.link.wait_connected(10)
    async with aio.insecure_channel(service.address) as channel:
        turns = turns_pb2_grpc.TurnServiceStub(channel)
        await start(turns)
        appended = 0
        stop = asyncio.Event()

        async def write() -> None:
            # A turn streaming events: every commit wakes the publisher.
            nonlocal appended
            while not stop.is_set():
                await turns.AppendEvents(
                    pb.AppendEventsRequest(
                        turn_id="t1", attempt=0, events=events(appended + 1, "token")
                    )
                )
                appended += 1

        writer = asyncio.create_task(write())
        try:
            relay.hold(until=b"PING\r\n")
            await relay.holding.wait()  # a batch's flush waits for its PONG
            relay.shut()
            nats_server.kill()
            nats_server.start()
            nc, got = await subscribe(nats_server.url, "vystak.turn.>")
            relay.open()
            try:
                since = appended
                # What is written after NATS is back reaches it while the turn writes on
                # (before the fix: never, until the service restarted).
                async with asyncio.timeout(30):
                    await got.wait_for(lambda: any(m["seq"] > since for m in got.on(".t1")))
                stop.set()
                await writer
                await asyncio.wait_for(service.outbox.wait_drained(), 30)
                assert service.outbox.backlog() == 0
                await got.wait_for(lambda: max(m["seq"] for m in got.on(".t1")) == appended)
            finally:
                await nc.close()
        finally:
            stop.set()
            await asyncio.gather(writer, return_exceptions=True)


async def test_the_link_says_why_nats_closed_its_connection_and_shows_a_refusal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "nats.conf"
    config.write_text(
        "max_payload: 1024\n"
        "authorization { users = [{user: svc, password: pw, "
        'permissions: {publish: {deny: ["vystak.denied"]}}}] }\n'
    )
    server = NatsServer(config_file=config)
    server.start()
    link = NatsLink(server.url.replace("nats://", "nats://svc:pw@"))
    dialled = Dialled(link)
    try:
        with caplog.at_level(logging.WARNING, logger="turnkeeper_server.messaging.link"):
            await link.start()
            nc = await dialled.count(1)
            # Refused, the connection kept: a misconfigured user, worth a warning.
            await nc.publish("vystak.denied", b"{}")
            await nc.flush()
            # Within max_payload, but not with its header: the server closes.
            await nc.publish(SUBJECT, b"x" * 1010, headers={"Nats-Msg-Id": "1"})
            await dialled.count(2)
        said = [r.getMessage() for r in caplog.records]
        assert any("NATS refused" in m and "vystak.denied" in m for m in said), said
        assert any(
            "lost the NATS connection (nats: maximum payload violation)" in m for m in said
        ), said
    finally:
        await link.stop()
        server.stop()


LINK_LOGGER = "turnkeeper_server.messaging.link"


async def test_a_message_over_max_payload_with_its_headers_is_refused_before_it_is_sent(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "nats.conf"
    config.write_text("max_payload: 1024\n")
    server = NatsServer(config_file=config)
    server.start()
    link = NatsLink(server.url)
    dialled = Dialled(link)
    try:
        await link.start()
        first = await dialled.count(1)
        # 1010 bytes fit max_payload, not with the Nats-Msg-Id header: the server
        # would close the connection, and the batch would go again on every new one.
        with caplog.at_level(logging.ERROR, logger=LINK_LOGGER):
            assert not await link.publish_batch(
                [OutboxRow(7, SUBJECT, b"x" * 1010, None, 1), *rows(8, 9)]
            )
        # The link's alone: a busy worker's shared deployment logs warnings too.
        [said] = [r.getMessage() for r in caplog.records if r.name == LINK_LOGGER]
        assert "outbox message 7 is 1038 bytes" in said and "max_payload of 1024" in said
        assert "raise max_payload" in said
        # Nothing was sent: the connection is kept, and takes what fits.
        assert link.client is first
        assert await link.publish_batch(rows(8, 9))
        assert link.client is first
    finally:
        await link.stop()
        server.stop()


async def test_a_batch_refused_with_nats_up_is_tried_again_after_a_wait() -> None:
    class Refusing:
        enabled = True
        connected = True
        tries = 0
        tried = asyncio.Event()

        async def publish_batch(self, batch: list[OutboxRow]) -> bool:
            self.tries += 1
            self.tried.set()
            return False

    class Backlog:
        async def drain_outbox(self, limit: int, publish: Any) -> int:
            return 0 if not await publish(rows(1, 1)) else 1

    link = Refusing()
    publisher = OutboxPublisher(Backlog(), link, idle_poll=600)  # type: ignore[arg-type]
    await publisher.start()
    try:
        await link.tried.wait()
        # Commits keep coming: each used to bring the refused batch again at once.
        for _ in range(20):
            publisher.wake()
            await asyncio.sleep(0)
        assert link.tries == 1
        assert publisher.failures == 1
    finally:
        await publisher.stop()
