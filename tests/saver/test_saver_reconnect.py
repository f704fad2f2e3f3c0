"""A run whose connection to the service breaks mid-run (the live connections cut,
or the service restarted on its files) goes on, and loses nothing acknowledged: on
the stream, the messages not answered yet are sent again on a new stream; on the
unary path, grpc retries the idempotent calls. Runs on both transports
(tests/saver/conftest.py), against a relay the test cuts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from uuid import uuid4

import grpc
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from turnkeeper import errors
from turnkeeper.agent.saver import RemoteSaver
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper_server.app import TurnkeeperServer

from tests.saver.test_remote_saver import _start_turn, fenced
from tests.support.nats import NatsServer
from tests.support.relay import Relay
from tests.support.service import ServiceFactory

# The turns are written by the test across cut connections and a service restart,
# with no agent to renew their lease (decision 690).
pytestmark = [pytest.mark.timeout(120), pytest.mark.both_backends, pytest.mark.unrenewed]


@pytest.fixture
async def relay(service: TurnkeeperServer) -> AsyncIterator[Relay]:
    relay = Relay(service.port)
    await relay.start()
    yield relay
    await relay.stop()


def _cut(relay: Relay) -> None:
    relay.shut()
    relay.open()


async def _run(saver: RemoteSaver, thread: str, turn_id: str, steps: range) -> list[str]:
    """Checkpoints `steps`, each with a task's writes, like a run's steps."""
    ids = []
    for step in steps:
        checkpoint = empty_checkpoint()
        await saver.aput(fenced(thread, turn_id, 0), checkpoint, {"step": step}, {})
        await saver.aput_writes(
            fenced(thread, turn_id, 0, checkpoint["id"]), [("log", step)], f"task-{step}"
        )
        ids.append(checkpoint["id"])
    return ids


async def _stored(saver: RemoteSaver, thread: str) -> dict[str, list[object]]:
    return {
        t.config["configurable"]["checkpoint_id"]: [w[2] for w in t.pending_writes or []]
        async for t in saver.alist({"configurable": {"thread_id": thread}})
    }


async def test_cut_connections_lose_no_acknowledged_write(
    service: TurnkeeperServer, relay: Relay
) -> None:
    thread, turn_id = f"cut-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=f"127.0.0.1:{relay.port}")
    async with AsyncTurnkeeperClient(options) as client, RemoteSaver(options=options) as saver:
        await _start_turn(client, thread, turn_id)
        before = await _run(saver, thread, turn_id, range(3))
        _cut(relay)
        after = await _run(saver, thread, turn_id, range(3, 6))
        # Writes in flight while the connection is cut: each is answered once stored.
        checkpoint = empty_checkpoint()
        await saver.aput(fenced(thread, turn_id, 0), checkpoint, {"step": 6}, {})
        config = fenced(thread, turn_id, 0, checkpoint["id"])
        pending = [
            asyncio.create_task(saver.aput_writes(config, [("log", n)], f"par-{n}"))
            for n in range(8)
        ]
        _cut(relay)
        await asyncio.gather(*pending)

        stored = await _stored(saver, thread)
    assert set(stored) == {*before, *after, checkpoint["id"]}
    for step, checkpoint_id in enumerate(before + after):
        assert stored[checkpoint_id] == [step]
    assert sorted(stored[checkpoint["id"]]) == list(range(8))  # type: ignore[type-var]


async def test_a_service_restart_mid_run_loses_no_acknowledged_write(
    service: TurnkeeperServer,
    relay: Relay,
    make_service: ServiceFactory,
    nats_server: NatsServer,
) -> None:
    thread, turn_id = f"restart-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=f"127.0.0.1:{relay.port}")
    async with AsyncTurnkeeperClient(options) as client, RemoteSaver(options=options) as saver:
        await _start_turn(client, thread, turn_id)
        before = await _run(saver, thread, turn_id, range(3))
        await service.stop(0)
        restarted = await make_service(nats_url=nats_server.url)
        relay.upstream_port = restarted.port
        _cut(relay)
        after = await _run(saver, thread, turn_id, range(3, 6))
        stored = await _stored(saver, thread)
    assert set(stored) == {*before, *after}
    for step, checkpoint_id in enumerate(before + after):
        assert stored[checkpoint_id] == [step]


async def test_the_blocking_api_goes_on_after_a_cut(
    service: TurnkeeperServer, relay: Relay
) -> None:
    thread, turn_id = f"cut-sync-{uuid4().hex[:8]}", f"turn-{uuid4().hex[:8]}"
    options = ConnectionOptions(target=f"127.0.0.1:{relay.port}")
    async with AsyncTurnkeeperClient(options) as client, RemoteSaver(options=options) as saver:
        await _start_turn(client, thread, turn_id)
        ids = []
        for step in range(4):
            if step == 2:
                _cut(relay)
            checkpoint = empty_checkpoint()
            await asyncio.to_thread(
                saver.put, fenced(thread, turn_id, 0), checkpoint, {"step": step}, {}
            )
            ids.append(checkpoint["id"])
        stored = await _stored(saver, thread)
    assert set(stored) == set(ids)


async def test_an_unanswered_operation_fails_at_the_deadline() -> None:
    # A TCP server that accepts and never answers: no gRPC handshake, no reply.
    held: list[asyncio.StreamWriter] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        while await reader.read(65536):
            pass

    silent = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    options = ConnectionOptions(target=f"127.0.0.1:{port}", default_timeout=0.5)
    try:
        async with RemoteSaver(options=options) as saver:
            with pytest.raises(errors.TurnkeeperError) as info:
                await saver.aget_tuple({"configurable": {"thread_id": "t"}})
            assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
            with pytest.raises(errors.TurnkeeperError) as info:
                await asyncio.to_thread(saver.get_tuple, {"configurable": {"thread_id": "t"}})
            assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        for writer in held:
            writer.close()
        silent.close()
