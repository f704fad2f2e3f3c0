"""Several replicas on one PostgreSQL database: none is special, and the journal's
guarantees hold for calls spread over them (one live turn per thread, contiguous
seqs, each outbox row published, WatchTurn woken by another replica's append, a
replica SIGKILLed under load loses nothing acknowledged)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeAlias

import grpc
import psycopg
import pytest
from grpc import aio
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer, subscribe
from tests.support.postgres import PostgresCluster
from tests.support.procs import ServiceProcess
from tests.support.service import ServiceFactory
from tests.support.turns import events, start, value
from tests.support.watch import Watcher, seqs
from tests.support.watch import first_read as watch_first_read

Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"
REPLICAS = 3
# The tests that start turns in a replica's name and write them themselves, with no
# agent to renew them, are marked `unrenewed` (tests/support/service.py): on a loaded
# machine the short test lease lapsed between two appends and a reaper re-drove the
# turn away mid-test (ABORTED "attempt 0 was re-driven away"). The reapers' own test
# keeps the short lease.
# What a caller sees from a replica that is going away: try another one.
RETRY_ELSEWHERE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}


@pytest.fixture
def database(postgres_cluster: PostgresCluster) -> str:
    return postgres_cluster.new_database()


@pytest.fixture
async def replicas(
    make_service: ServiceFactory, nats_server: NatsServer, database: str
) -> list[TurnkeeperServer]:
    return [
        await make_service(database_url=database, nats_url=nats_server.url) for _ in range(REPLICAS)
    ]


@pytest.fixture
async def stubs(replicas: list[TurnkeeperServer]) -> AsyncIterator[list[Stub]]:
    channels = [aio.insecure_channel(r.address) for r in replicas]
    try:
        yield [turns_pb2_grpc.TurnServiceStub(ch) for ch in channels]
    finally:
        for ch in channels:
            await ch.close(None)


def live_turns_per_thread(database: str) -> dict[str, int]:
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT thread_id, count(*) FROM turns WHERE state IN ('RUNNING','PARKED') "
            "GROUP BY thread_id"
        ).fetchall()
    return {r[0]: r[1] for r in rows}


@pytest.mark.unrenewed
async def test_concurrent_starts_over_replicas_leave_one_live_turn_per_thread(
    stubs: list[Stub], database: str
) -> None:
    async def attempt(i: int) -> tuple[str, Any]:
        stub = stubs[i % REPLICAS]
        try:
            got = await start(stub, turn_id=f"t{i}", thread_id=f"th{i % 50}")
        except aio.AioRpcError as exc:
            return f"th{i % 50}", exc.code()
        return f"th{i % 50}", got.created

    results = await asyncio.gather(*(attempt(i) for i in range(200)))

    created = Counter(thread for thread, outcome in results if outcome is True)
    refused = [outcome for _, outcome in results if outcome is not True]
    assert created == {f"th{n}": 1 for n in range(50)}
    assert set(refused) == {grpc.StatusCode.FAILED_PRECONDITION}
    assert live_turns_per_thread(database) == {f"th{n}": 1 for n in range(50)}


@pytest.mark.unrenewed
async def test_the_same_start_through_every_replica_creates_the_turn_once(
    stubs: list[Stub],
) -> None:
    results = await asyncio.gather(
        *(start(stubs[i % REPLICAS], turn_id="same", thread_id="th") for i in range(30))
    )
    assert sum(r.created for r in results) == 1
    assert {r.turn.turn_id for r in results} == {"same"}


@pytest.mark.unrenewed
async def test_appends_through_different_replicas_keep_seqs_contiguous(stubs: list[Stub]) -> None:
    await start(stubs[0], turn_id="t1", thread_id="th1")
    acknowledged: dict[int, str] = {}

    async def writer(name: str, replicas: itertools.cycle[Stub]) -> None:
        for n in range(15):
            data = json.dumps({"writer": name, "n": n})
            while True:
                stub = next(replicas)
                last = (await stub.TurnStatus(pb.TurnStatusRequest(turn_id="t1"))).last_seq
                try:
                    resp = await next(replicas).AppendEvents(
                        pb.AppendEventsRequest(
                            turn_id="t1",
                            attempt=0,
                            events=[pb.EventInput(seq=last + 1, type="token", data_json=data)],
                        )
                    )
                except aio.AioRpcError as exc:
                    # Another writer took that seq first: read again and retry.
                    if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
                        raise
                    continue
                acknowledged[resp.last_seq] = data
                break

    await asyncio.gather(
        *(writer(f"w{i}", itertools.cycle(stubs[i:] + stubs[:i])) for i in range(REPLICAS))
    )

    listed = await stubs[2].ListEvents(pb.ListEventsRequest(turn_id="t1", page_size=100))
    assert [e.seq for e in listed.events] == list(range(1, 46))
    assert {e.seq: e.data_json for e in listed.events} == acknowledged


@pytest.mark.unrenewed
async def test_watch_on_one_replica_sees_appends_through_another(stubs: list[Stub]) -> None:
    await start(stubs[0], turn_id="t1", thread_id="th1")
    watcher = Watcher()
    watcher.start(stubs[0], "t1")
    for seq in range(1, 4):
        await stubs[1 + seq % 2].AppendEvents(
            pb.AppendEventsRequest(
                turn_id="t1",
                attempt=0,
                events=[pb.EventInput(seq=seq, type="token", data_json="{}")],
            )
        )
        # Woken by the other replica's NOTIFY, not by a poll: each event arrives
        # before the next is appended.
        await watcher.wait_for(lambda seq=seq: seqs(watcher.shown) == list(range(1, seq + 1)))
    await stubs[2].FinishTurn(
        pb.FinishTurnRequest(turn_id="t1", attempt=0, outcome=pb.OUTCOME_DONE)
    )
    await watcher.finished()
    assert [t for _, t, _ in watcher.shown] == ["token"] * 3 + ["turn.done"]


@pytest.mark.unrenewed
async def test_a_watch_joining_past_another_replicas_rewind_resets_before_the_rerun(
    stubs: list[Stub], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The PostgreSQL fault campaign's late joiner (decision 630): its after_seq came
    # from before a re-drive through one replica rewound the turn below it; its
    # WatchTurn on another replica read nothing after it, and the re-run's appends
    # through that replica went out from the news as repeats, with no reset.
    first_read = watch_first_read(monkeypatch)
    await start(stubs[0], turn_id="t1", thread_id="th1")
    await stubs[1].AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=0, events=events(1, "token", "token"))
    )
    redriven = await stubs[0].Redrive(
        pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2")
    )
    assert redriven.turns[0].rewind_seq == 0
    watcher = Watcher()
    watcher.start(stubs[1], "t1", after_seq=2)
    await first_read.wait()
    await stubs[1].AppendEvents(
        pb.AppendEventsRequest(turn_id="t1", attempt=1, events=events(1, "token", "token"))
    )
    await stubs[1].FinishTurn(
        pb.FinishTurnRequest(turn_id="t1", attempt=1, outcome=pb.OUTCOME_DONE)
    )
    await watcher.finished()
    assert watcher.frames[0].HasField("reset")
    assert watcher.resets == 1
    assert seqs(watcher.shown) == [1, 2, 3]
    assert [f.event.attempt for f in watcher.frames[1:]] == [1, 1, 1]


@pytest.mark.unrenewed
async def test_three_outbox_publishers_publish_every_row_once(
    stubs: list[Stub], replicas: list[TurnkeeperServer], nats_server: NatsServer
) -> None:
    nc, got = await subscribe(nats_server.url, "vystak.turn.events.>")
    try:

        async def turn(i: int) -> None:
            stub = stubs[i % REPLICAS]
            await start(stub, turn_id=f"t{i}", thread_id=f"th{i}")
            for seq in range(1, 11):
                await stubs[(i + seq) % REPLICAS].AppendEvents(
                    pb.AppendEventsRequest(
                        turn_id=f"t{i}",
                        attempt=0,
                        events=[pb.EventInput(seq=seq, type="token", data_json="{}")],
                    )
                )

        await asyncio.gather(*(turn(i) for i in range(30)))
        await got.wait_for(lambda: len(got.messages) >= 300, timeout=30)
        for replica in replicas:
            await asyncio.wait_for(replica.outbox.wait_drained(), 10)
    finally:
        await nc.close()
    arrived = Counter((m["turn_id"], m["seq"]) for _, m, _ in got.messages)
    assert set(arrived) == {(f"t{i}", seq) for i in range(30) for seq in range(1, 11)}
    assert max(arrived.values()) == 1
    ids = [msg_id for _, _, msg_id in got.messages]
    assert len(set(ids)) == len(ids) == 300
    # All three drained some of it: none of them is special.
    assert all(r.outbox.published > 0 for r in replicas)


async def test_postgres_restart_under_load_is_unavailable_then_loses_nothing(
    stubs: list[Stub], postgres_cluster: PostgresCluster
) -> None:
    acknowledged: dict[str, int] = {}
    unavailable: list[str] = []
    halfway = asyncio.Event()

    async def call(i: int, method: str, request: Any) -> Any:
        for k in itertools.count():
            try:
                return await getattr(stubs[(i + k) % REPLICAS], method)(request, timeout=20)
            except aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                unavailable.append(exc.details() or "")
                # A caller's backoff while the database is away, not synchronisation.
                await asyncio.sleep(0.1)
        raise AssertionError("unreachable")

    async def agent(i: int) -> None:
        await call(
            i,
            "StartTurn",
            pb.StartTurnRequest(turn_id=f"t{i}", thread_id=f"th{i}", agent="a", input=value({})),
        )
        for seq in range(1, 41):
            resp = await call(
                i + seq,
                "AppendEvents",
                pb.AppendEventsRequest(
                    turn_id=f"t{i}",
                    attempt=0,
                    events=[pb.EventInput(seq=seq, type="token", data_json="{}")],
                ),
            )
            acknowledged[f"t{i}"] = resp.last_seq
            if sum(acknowledged.values()) >= 60:
                halfway.set()

    agents = asyncio.gather(*(agent(i) for i in range(6)))
    await asyncio.wait_for(halfway.wait(), 60)
    await asyncio.to_thread(postgres_cluster.stop_server)
    try:
        # While it is down every replica answers UNAVAILABLE, saying why.
        for stub in stubs:
            with pytest.raises(aio.AioRpcError) as info:
                await stub.AppendEvents(
                    pb.AppendEventsRequest(
                        turn_id="t0",
                        attempt=0,
                        events=[pb.EventInput(seq=11, type="token", data_json="{}")],
                    )
                )
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "PostgreSQL" in (info.value.details() or "")
            with pytest.raises(aio.AioRpcError) as info:
                await stub.TurnStatus(pb.TurnStatusRequest(turn_id="t0"))
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        await asyncio.to_thread(postgres_cluster.start_server)
    await asyncio.wait_for(agents, 120)
    # The callers met the outage and carried on after it: full service.
    assert unavailable
    assert acknowledged == {f"t{i}": 40 for i in range(6)}
    for i in range(6):
        # Through `call`: a replica whose read connection last failed during the
        # outage may still answer UNAVAILABLE once before it connects again.
        listed = await call(i, "ListEvents", pb.ListEventsRequest(turn_id=f"t{i}"))
        assert [e.seq for e in listed.events] == list(range(1, 41))


@pytest.mark.slow
async def test_a_replica_sigkilled_under_load_loses_nothing_acknowledged(
    tmp_path: Path, database: str
) -> None:
    procs = [
        ServiceProcess(tmp_path / "r0", database_url=database),
        ServiceProcess(tmp_path / "r1", database_url=database),
        # The same setting from the environment instead of the flag.
        ServiceProcess(tmp_path / "r2", env={"TURNKEEPER_DATABASE_URL": database}),
    ]
    addresses = [p.start() for p in procs]
    channels = [aio.insecure_channel(a) for a in addresses]
    stubs = [turns_pb2_grpc.TurnServiceStub(ch) for ch in channels]
    acknowledged: dict[str, int] = {}
    halfway = asyncio.Event()

    async def call(i: int, method: str, request: Any) -> Any:
        """The request through replica i, or the next one while i is gone."""
        for k in itertools.count():
            stub = stubs[(i + k) % REPLICAS]
            try:
                return await getattr(stub, method)(request, timeout=10)
            except aio.AioRpcError as exc:
                if exc.code() not in RETRY_ELSEWHERE:
                    raise
        raise AssertionError("unreachable")

    async def agent(i: int) -> None:
        turn_id = f"t{i}"
        await call(
            i,
            "StartTurn",
            pb.StartTurnRequest(
                turn_id=turn_id, thread_id=f"th{i}", agent="a", input=value({"i": i})
            ),
        )
        for seq in range(1, 31):
            resp = await call(
                i + seq,
                "AppendEvents",
                pb.AppendEventsRequest(
                    turn_id=turn_id,
                    attempt=0,
                    events=[pb.EventInput(seq=seq, type="token", data_json=f'{{"n":{seq}}}')],
                ),
            )
            acknowledged[turn_id] = resp.last_seq
            if sum(acknowledged.values()) >= 200:
                halfway.set()

    try:
        agents = asyncio.gather(*(agent(i) for i in range(12)))
        await asyncio.wait_for(halfway.wait(), 60)
        procs[0].kill()
        await asyncio.wait_for(agents, 120)
        for turn_id, last in acknowledged.items():
            listed = await stubs[1].ListEvents(pb.ListEventsRequest(turn_id=turn_id))
            assert [e.seq for e in listed.events] == list(range(1, last + 1))
        assert acknowledged == {f"t{i}": 30 for i in range(12)}
        # Every replica served the one database: none wrote SQLite files of its own.
        assert not any((tmp_path / f"r{i}" / "turns.db").exists() for i in range(REPLICAS))
    finally:
        for ch in channels:
            await ch.close(None)
        for p in procs:
            p.kill()


@pytest.mark.unrenewed
async def test_concurrent_redrives_spend_each_attempt_once_and_fail_once_at_the_cap(
    stubs: list[Stub], replicas: list[TurnkeeperServer]
) -> None:
    cap = replicas[0].policy.max_redrives
    await start(stubs[0], turn_id="t1", thread_id="th1")
    outcomes: list[Any] = []

    async def redrive(i: int) -> None:
        try:
            resp = await stubs[i % REPLICAS].Redrive(pb.RedriveRequest(turn_id="t1", force=True))
        except aio.AioRpcError as exc:
            outcomes.append(exc.code())
            return
        outcomes.append(resp.turns[0].turn.state)

    await asyncio.gather(*(redrive(i) for i in range(cap + 6)))

    # `cap` re-drives, then the one at the cap fails the turn, then the rest find it over.
    assert Counter(outcomes) == {
        pb.TURN_STATE_RUNNING: cap,
        pb.TURN_STATE_FAILED: 1,
        grpc.StatusCode.FAILED_PRECONDITION: 5,
    }
    turn = (await stubs[1].GetTurn(pb.GetTurnRequest(turn_id="t1"))).turn
    assert (turn.attempts, turn.rewinds) == (cap, cap)
    listed = await stubs[2].ListEvents(pb.ListEventsRequest(turn_id="t1"))
    assert [e.type for e in listed.events] == ["turn.failed"]


async def test_reapers_on_every_replica_redrive_each_expired_turn_once(
    stubs: list[Stub], replicas: list[TurnkeeperServer], nats_server: NatsServer
) -> None:
    nc, got = await subscribe(nats_server.url, "vystak.turn.rewind")
    try:
        # Owned by a replica that never heartbeats: every lease expires together,
        # and three reapers find them in the same passes.
        for i in range(20):
            await start(stubs[i % REPLICAS], turn_id=f"t{i}", thread_id=f"th{i}", replica="gone")
        await got.wait_for(lambda: len(got.messages) >= 20, timeout=30)
        for replica in replicas:
            await asyncio.wait_for(replica.outbox.wait_drained(), 10)
        turns = [
            (await stubs[0].GetTurn(pb.GetTurnRequest(turn_id=f"t{i}"))).turn for i in range(20)
        ]
    finally:
        await nc.close()
    # Re-driven once each: the turns wait unowned for a claimer now, which later
    # reaper passes hand out again without spending an attempt.
    assert [(t.attempts, t.rewinds) for t in turns] == [(1, 1)] * 20
    assert sorted(m["turn_id"] for _, m, _ in got.messages) == sorted(f"t{i}" for i in range(20))
