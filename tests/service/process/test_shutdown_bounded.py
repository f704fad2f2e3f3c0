"""SIGTERM stops `turnkeeper serve` within its --shutdown-timeout in every state
(decision 319): the database stopped, NATS stopped, a turn mid-run, streams
attached; a second signal stops it at once; and nothing acknowledged is lost (the
turn mid-run is re-driven after the restart, NATS' backlog goes out). Real
processes, on both backends."""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc

from tests.support.nats import NatsServer, subscribe
from tests.support.postgres import PostgresCluster
from tests.support.procs import ServiceProcess
from tests.support.turns import events, start

pytestmark = [pytest.mark.slow, pytest.mark.both_backends]

# The deadline the tests set, and what a loaded machine may add to it: starting
# the interpreter's exit, the kernel's reaping. Bounds on the process's exit only.
DEADLINE = 3.0
MARGIN = 10.0
SHUTDOWN = ["--shutdown-timeout", f"{DEADLINE:g}s"]
_STOPPING = re.compile(r"signal received: shutting down")
_CONSOLE = re.compile(r"turnkeeper console on (\S+)console/")


async def exit_status(proc: ServiceProcess, timeout: float) -> int:
    """The process's exit status, awaited (no poll), failing past `timeout`."""
    assert proc.process is not None
    return await asyncio.wait_for(asyncio.to_thread(proc.process.wait), timeout)


async def sigterm(proc: ServiceProcess) -> int:
    assert proc.process is not None
    proc.process.send_signal(signal.SIGTERM)
    return await exit_status(proc, DEADLINE + MARGIN)


async def append_mid_run(address: str, turn_id: str = "t1") -> int:
    """A turn started by its agent (replica r1) and three events acknowledged."""
    async with aio.insecure_channel(address) as ch:
        turns = turns_pb2_grpc.TurnServiceStub(ch)
        await start(turns, turn_id=turn_id)
        resp = await turns.AppendEvents(
            pb.AppendEventsRequest(turn_id=turn_id, attempt=0, events=events(1, "a", "b", "c"))
        )
        return resp.last_seq


@pytest.fixture
async def processes() -> AsyncIterator[list[ServiceProcess]]:
    started: list[ServiceProcess] = []
    yield started
    for proc in started:
        proc.kill()


async def test_sigterm_with_the_database_stopped_exits_within_the_deadline(
    tmp_path: Path,
    postgres_cluster: PostgresCluster,
    nats_server: NatsServer,
    processes: list[ServiceProcess],
) -> None:
    # The replica: PostgreSQL gone under it, SIGTERM, then minutes of
    # "LISTEN connection to PostgreSQL lost; reconnecting".
    database = postgres_cluster.new_database()
    proc = ServiceProcess(tmp_path, database_url=database, nats_url=nats_server.url, extra=SHUTDOWN)
    processes.append(proc)
    address = await asyncio.to_thread(proc.start)
    await append_mid_run(address)
    await asyncio.to_thread(postgres_cluster.stop_server)
    try:
        status = await sigterm(proc)
    finally:
        await asyncio.to_thread(postgres_cluster.start_server)
    # Stopped in order, or ended by the deadline: either way, gone in time.
    assert status in (0, 1), proc.log[-20:]
    # What was acknowledged before the outage is there after it.
    again = ServiceProcess(tmp_path, database_url=database, extra=SHUTDOWN)
    processes.append(again)
    address = await asyncio.to_thread(again.start)
    async with aio.insecure_channel(address) as ch:
        listed = await turns_pb2_grpc.TurnServiceStub(ch).ListEvents(
            pb.ListEventsRequest(turn_id="t1")
        )
    assert [e.seq for e in listed.events] == [1, 2, 3]


async def test_sigterm_with_nats_stopped_exits_in_time_and_the_backlog_goes_out_later(
    tmp_path: Path,
    nats_server: NatsServer,
    database_url: str | None,
    processes: list[ServiceProcess],
) -> None:
    proc = ServiceProcess(
        tmp_path, nats_url=nats_server.url, database_url=database_url, extra=SHUTDOWN
    )
    processes.append(proc)
    address = await asyncio.to_thread(proc.start)
    nats_server.stop()
    await append_mid_run(address)
    assert await sigterm(proc) in (0, 1), proc.log[-20:]
    # The mirror of the events written while NATS was down: published by the next start.
    nats_server.start()
    nc, got = await subscribe(nats_server.url, "vystak.turn.>")
    again = ServiceProcess(
        tmp_path, nats_url=nats_server.url, database_url=database_url, extra=SHUTDOWN
    )
    processes.append(again)
    await asyncio.to_thread(again.start)
    try:
        await got.wait_for(lambda: len(got.messages) >= 3, timeout=30)
        assert [m["seq"] for _, m, _ in got.messages][:3] == [1, 2, 3]
    finally:
        await nc.close()


async def test_sigterm_with_streams_attached_ends_them_and_exits_in_time(
    tmp_path: Path, database_url: str | None, processes: list[ServiceProcess]
) -> None:
    proc = ServiceProcess(
        tmp_path, database_url=database_url, extra=[*SHUTDOWN, "--http-port", "0"]
    )
    processes.append(proc)
    address = await asyncio.to_thread(proc.start)
    base = (await asyncio.to_thread(proc.wait_line, _CONSOLE)).group(1)
    await append_mid_run(address)
    async with aio.insecure_channel(address) as ch, aiohttp.ClientSession() as session:
        watch = turns_pb2_grpc.TurnServiceStub(ch).WatchTurn(
            pb.WatchTurnRequest(turn_id="t1", after_seq=0)
        )
        watched: list[int] = []
        async for frame in watch:
            watched.append(frame.event.seq)
            if len(watched) == 3:
                break
        assert watched[-1] == 3
        async with session.get(f"{base}v1/turns/t1/events") as sse:
            assert sse.status == 200
            # The stream has begun: its first frame arrived.
            assert await sse.content.readuntil(b"\n\n")

            async def drain_sse() -> None:
                async for _ in sse.content.iter_any():
                    pass

            async def drain_watch() -> None:
                # Ends with an error status or an end of stream; either is an end.
                with contextlib.suppress(aio.AioRpcError):
                    async for _ in watch:
                        pass

            readers = asyncio.gather(drain_sse(), drain_watch(), return_exceptions=True)
            assert await sigterm(proc) in (0, 1), proc.log[-20:]
            # Both streams ended with the process: their clients reconnect elsewhere.
            await asyncio.wait_for(readers, MARGIN)


async def test_a_turn_mid_run_is_redriven_after_a_bounded_stop(
    tmp_path: Path, database_url: str | None, processes: list[ServiceProcess]
) -> None:
    # A 4 s lease: the stored lease the next start waits out (15 s by default); the
    # turn's agent never beats, and SIGTERM follows its three appends at once.
    proc = ServiceProcess(
        tmp_path, database_url=database_url, extra=[*SHUTDOWN, "--lease-seconds", "4"]
    )
    processes.append(proc)
    address = await asyncio.to_thread(proc.start)
    acknowledged = await append_mid_run(address)
    assert await sigterm(proc) == 0, proc.log[-20:]
    # Its agent is gone with the replica: the next start's reaper re-drives it when
    # its lease lapses, and the acknowledged events are all there.
    again = ServiceProcess(
        tmp_path, database_url=database_url, extra=[*SHUTDOWN, "--lease-seconds", "1"]
    )
    processes.append(again)
    address = await asyncio.to_thread(again.start)
    async with aio.insecure_channel(address) as ch:
        turns = turns_pb2_grpc.TurnServiceStub(ch)

        async def redriven() -> pb.TurnStatusResponse:
            # A state of another process with nothing to await: a bounded poll.
            while True:
                status = await turns.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))
                if status.attempts >= 1:
                    return status
                await asyncio.sleep(0.1)

        status = await asyncio.wait_for(redriven(), 60)
    # Not lost, not failed: running again, from its newest checkpoint.
    assert acknowledged == 3
    assert status.state == pb.TURN_STATE_RUNNING


async def test_a_second_signal_stops_at_once(
    tmp_path: Path, database_url: str | None, processes: list[ServiceProcess]
) -> None:
    # A long deadline, and a WatchTurn held open: the gRPC drain alone would take
    # its grace. The second SIGTERM does not wait for any of it.
    proc = ServiceProcess(tmp_path, database_url=database_url, extra=["--shutdown-timeout", "10m"])
    processes.append(proc)
    address = await asyncio.to_thread(proc.start)
    await append_mid_run(address)
    assert proc.process is not None
    async with aio.insecure_channel(address) as ch:
        watch = turns_pb2_grpc.TurnServiceStub(ch).WatchTurn(
            pb.WatchTurnRequest(turn_id="t1", after_seq=0)
        )
        await watch.read()
        proc.process.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait_line, _STOPPING)
        proc.process.send_signal(signal.SIGTERM)
        status = await exit_status(proc, MARGIN)
        watch.cancel()
    # Ended by the signal itself, not by a finished stop.
    assert status == -signal.SIGTERM
    assert not any("turnkeeper stopped" in line for line in proc.log)
