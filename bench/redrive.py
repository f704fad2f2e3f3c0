"""Startup re-drive of many orphaned turns: one Redrive(agent, replica, incarnation)
call after an agent process restarted, with every rewind published to NATS.

turns.db is filled directly (bench/populate.py) with RUNNING turns owned by the
replica's previous incarnation, each with retained events and a checkpoint boundary,
so each re-drive deletes the events after the boundary, spends an attempt and writes
a rewind to the outbox. Timed: from the call to its answer, and to the last rewind
received by a NATS subscriber.
"""

from __future__ import annotations

import asyncio
import time

import nats
from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

from bench import populate
from bench.common import (
    Row,
    Section,
    ServerProcess,
    Size,
    cpu_delta,
    cpu_seconds,
    fmt_ratio,
    fmt_s,
    median,
    nats_server,
    ratio,
    scratch_dir,
)

EVENTS_PER_TURN = 6
BOUNDARY = 3


async def _redrive(address: str, nats_url: str, count: int, pid: int) -> tuple[float, float, float]:
    """(seconds to the answer, seconds to the last rewind on NATS, service CPU seconds)."""
    received = 0
    all_received = asyncio.Event()

    async def count_rewind(_msg: object) -> None:
        nonlocal received
        received += 1
        if received >= count:
            all_received.set()

    nc = await nats.connect(nats_url)
    try:
        await nc.subscribe("vystak.turn.rewind", cb=count_rewind)
        await nc.flush()
        async with aio.insecure_channel(
            address, options=[("grpc.max_receive_message_length", 256 << 20)]
        ) as channel:
            stub = turns_pb2_grpc.TurnServiceStub(channel)
            await channel.channel_ready()
            request = turns_pb2.RedriveRequest(agent="bench", replica="r1", incarnation="new")
            cpu = cpu_seconds(pid)
            started = time.perf_counter()
            response = await stub.Redrive(request, timeout=600)
            answered = time.perf_counter() - started
            if len(response.turns) != count:
                raise RuntimeError(f"re-drove {len(response.turns)} turns, expected {count}")
            await asyncio.wait_for(all_received.wait(), timeout=max(60.0, answered * 20))
            published = time.perf_counter() - started
            used = sum(cpu_delta(cpu, cpu_seconds(pid)).values())
    finally:
        await nc.close()
    return answered, published, used


def _one(count: int) -> tuple[float, float, float]:
    spec = populate.TurnSpec(
        count,
        state="RUNNING",
        replica="r1",
        incarnation="old",
        events_per_turn=EVENTS_PER_TURN,
        boundary_seq=BOUNDARY,
    )
    with scratch_dir("redrive") as data_dir, nats_server() as url:
        populate.fill(data_dir, spec)
        with ServerProcess(data_dir, nats_url=url) as server:
            return asyncio.run(_redrive(server.address, url, count, server.pid))


def run(size: Size) -> Section:
    small, large = size.redrive_counts
    section = Section(
        key="redrive",
        title="Re-drive of orphaned turns",
        method=(
            f"turns.db holds N RUNNING turns of one replica's old incarnation, each with "
            f"{EVENTS_PER_TURN} retained events and a checkpoint boundary at seq {BOUNDARY}. "
            "The service (own process, real nats-server) gets one startup-form "
            "`Redrive(agent, replica, new incarnation)`: every turn gets attempts+1, its "
            "events after the boundary deleted, and a rewind in the outbox. Timed to the "
            "answer and to the last rewind received on NATS; "
            f"{size.redrive_reps} repetitions of each N (fresh files each), medians."
        ),
    )
    times: dict[int, tuple[list[float], list[float], list[float]]] = {
        small: ([], [], []),
        large: ([], [], []),
    }
    for _ in range(size.redrive_reps):
        for count in (small, large):
            for values, value in zip(times[count], _one(count), strict=True):
                values.append(value)
    a_small, p_small = median(times[small][0]), median(times[small][1])
    a_large, p_large = median(times[large][0]), median(times[large][1])
    scale = ratio(p_large, p_small)
    c_small, c_large = median(times[small][2]), median(times[large][2])
    section.metrics = {
        f"answered_{small}_s": a_small,
        f"published_{small}_s": p_small,
        f"answered_{large}_s": a_large,
        f"published_{large}_s": p_large,
        "scaling": scale,
        f"cpu_{small}_s": c_small,
        f"cpu_{large}_s": c_large,
    }
    section.rows = [
        Row(f"{small:,} turns, to the answer", fmt_s(a_small)),
        Row(f"{small:,} turns, to the last rewind on NATS", fmt_s(p_small)),
        Row(f"{large:,} turns, to the answer", fmt_s(a_large)),
        Row(
            f"{large:,} turns, to the last rewind on NATS",
            fmt_s(p_large),
            target="≤ 5 s" if large == 10_000 else "—",
            met=p_large <= 5.0 if large == 10_000 else None,
        ),
        Row(
            f"{large // small}\u00d7 the turns (to the last rewind)",
            fmt_s(p_large),
            fmt_s(p_small),
            fmt_ratio(scale),
            f"≤ {1.1 * large / small:g}\u00d7",
            scale <= 1.1 * large / small,
        ),
        Row(
            f"{large // small}\u00d7 the turns (service CPU)",
            fmt_s(c_large),
            fmt_s(c_small),
            fmt_ratio(ratio(c_large, c_small)),
        ),
    ]
    return section
