"""Clients that fail over: three replica processes on one PostgreSQL database, a
client given all three addresses, and one replica SIGKILLed while it is in use.

The client spreads calls over the replicas (round_robin) and retries its idempotent
RPCs, which then land on a replica still up; the follower re-attaches WatchTurn by
after_seq on another replica and shows the exact transcript."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import TurnkeeperError
from turnkeeper.panel.follower import (
    ConclusionReason,
    FollowOptions,
    Transcript,
    TurnFollower,
)
from turnkeeper.v1 import turns_pb2 as pb

from tests.support.postgres import PostgresCluster
from tests.support.procs import ServiceProcess
from tests.support.turns import value

pytestmark = pytest.mark.slow

_METRICS = re.compile(r"metrics on http://\S+:(\d+)/metrics")
_WATCHERS = re.compile(r"^turnkeeper_watchers (\S+)$", re.M)


class Replica:
    def __init__(self, data_dir: Path, database: str) -> None:
        self.process = ServiceProcess(
            data_dir, database_url=database, extra=["--metrics-listen", "127.0.0.1:0"]
        )
        self.address = self.process.start()
        ports = [m.group(1) for line in self.process.log if (m := _METRICS.search(line))]
        self.metrics_port = int(ports[0])

    def watchers(self) -> int:
        """Open WatchTurn streams, from the replica's own gauge."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        found = _WATCHERS.search(text)
        assert found is not None, "no turnkeeper_watchers gauge"
        return int(float(found.group(1)))


@pytest.fixture
def replicas(tmp_path: Path, postgres_cluster: PostgresCluster) -> Iterator[list[Replica]]:
    database = postgres_cluster.new_database()
    started: list[Replica] = []
    try:
        for i in range(3):
            started.append(Replica(tmp_path / f"r{i}", database))
        yield started
    finally:
        for replica in started:
            replica.process.kill()


def all_of(replicas: list[Replica]) -> ConnectionOptions:
    return ConnectionOptions(target=",".join(r.address for r in replicas), default_timeout=20)


async def append(client: AsyncTurnkeeperClient, turn_id: str, seq: int) -> int:
    response = await client.append_events(
        pb.AppendEventsRequest(
            turn_id=turn_id,
            attempt=0,
            events=[pb.EventInput(seq=seq, type="token", data_json=f'{{"n":{seq}}}')],
        )
    )
    return response.last_seq


async def finish(client: AsyncTurnkeeperClient, turn_id: str) -> None:
    """FinishTurn is not retried by the client (a retry of one that committed would
    be refused): the caller asks TurnStatus and sends it again only if it did not."""
    while True:
        try:
            await client.finish_turn(
                pb.FinishTurnRequest(turn_id=turn_id, attempt=0, outcome=pb.OUTCOME_DONE)
            )
            return
        except TurnkeeperError as err:
            if err.code.name != "UNAVAILABLE":
                raise
        status = await client.turn_status(pb.TurnStatusRequest(turn_id=turn_id))
        if status.state == pb.TURN_STATE_DONE:
            return


async def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll a condition that has no event to await (another process's gauge)."""
    try:
        async with asyncio.timeout(timeout):
            while not await asyncio.to_thread(check):  # noqa: ASYNC110  (another process)
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"not reached: {what}") from None


async def test_a_client_with_three_addresses_keeps_working_when_one_is_sigkilled(
    replicas: list[Replica],
) -> None:
    acknowledged: dict[str, int] = {}
    halfway = asyncio.Event()
    async with AsyncTurnkeeperClient(all_of(replicas)) as client:

        async def agent(i: int) -> None:
            turn_id = f"t{i}"
            await client.start_turn(
                pb.StartTurnRequest(
                    turn_id=turn_id, thread_id=f"th{i}", agent="a", input=value({"i": i})
                )
            )
            for seq in range(1, 31):
                acknowledged[turn_id] = await append(client, turn_id, seq)
                status = await client.turn_status(pb.TurnStatusRequest(turn_id=turn_id))
                assert status.last_seq >= seq
                if sum(acknowledged.values()) >= 120:
                    halfway.set()

        agents = asyncio.gather(*(agent(i) for i in range(8)))
        await asyncio.wait_for(halfway.wait(), 60)
        replicas[0].process.kill()
        # No call failed: every one that met the dead replica was retried elsewhere.
        await asyncio.wait_for(agents, 120)
        assert acknowledged == {f"t{i}": 30 for i in range(8)}
        for i in range(8):
            listed = await client.list_events(pb.ListEventsRequest(turn_id=f"t{i}"))
            assert [e.seq for e in listed.events] == list(range(1, 31))
        # And the client goes on serving through the two that are left.
        await client.start_turn(
            pb.StartTurnRequest(turn_id="after", thread_id="th-after", agent="a", input=value({}))
        )
        await finish(client, "after")


async def test_a_follower_whose_replica_is_sigkilled_ends_with_the_exact_transcript(
    replicas: list[Replica],
) -> None:
    async with (
        AsyncTurnkeeperClient(all_of(replicas)) as writer,
        AsyncTurnkeeperClient(all_of(replicas)) as reader,
    ):
        await writer.start_turn(
            pb.StartTurnRequest(turn_id="t1", thread_id="th1", agent="a", input=value({}))
        )
        for seq in range(1, 6):
            await append(writer, "t1", seq)

        transcript = Transcript()
        changed = asyncio.Condition()

        async def follow() -> None:
            # A short idle gap so that a stream that is slow to come back is checked
            # by TurnStatus too; the follower must still show each event once.
            options = FollowOptions(idle_gap=1.0, deadline=120.0)
            async with TurnFollower(reader, "t1", options) as follower:
                async for frame in follower:
                    async with changed:
                        transcript.apply(frame)
                        changed.notify_all()

        following = asyncio.create_task(follow())
        async with changed:
            await asyncio.wait_for(changed.wait_for(lambda: len(transcript.events) == 5), 30)

        # The replica holding the stream: the one whose gauge shows it.
        await until(lambda: sum(r.watchers() for r in replicas) == 1, "one stream open")
        streaming = next(r for r in replicas if r.watchers() == 1)
        streaming.process.kill()

        for seq in range(6, 11):
            await append(writer, "t1", seq)
        await finish(writer, "t1")
        await asyncio.wait_for(following, 60)

    assert transcript.concluded is not None
    # Concluded by the terminal event on a re-attached stream, not by TurnStatus.
    assert transcript.concluded.reason is ConclusionReason.TERMINAL_EVENT
    assert transcript.resets == 0
    assert transcript.content() == [(n, "token", {"n": n}) for n in range(1, 11)] + [
        (11, "turn.done", transcript.events[-1].data)
    ]
