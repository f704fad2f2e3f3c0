"""The service's resident memory with a large journal.

turns.db is filled directly with the turns and retained events (bench/populate.py),
then the service starts in its own process and serves reads that touch all of it:
TurnStatus for every turn, ListTurns paged through every turn, ListEvents paged
through a sample of turns and WatchTurn replays of another sample. RSS is read
from /proc after the reads; VmHWM is the peak over the process's life.
"""

from __future__ import annotations

import asyncio

from grpc import aio
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

from bench import populate
from bench.common import Row, Section, ServerProcess, Size, read_rss, scratch_dir

SAMPLE = 200
MB = 1 << 20


async def _reads(address: str, spec: populate.TurnSpec) -> int:
    """Reads over the whole journal; returns how many events came back."""
    ids = [populate.turn_id(spec, i) for i in range(spec.count)]
    seen = 0
    async with aio.insecure_channel(address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        for start in range(0, len(ids), 64):
            await asyncio.gather(
                *(
                    stub.TurnStatus(turns_pb2.TurnStatusRequest(turn_id=t))
                    for t in ids[start : start + 64]
                )
            )
        token = ""
        while True:
            page = await stub.ListTurns(
                turns_pb2.ListTurnsRequest(page_size=1000, page_token=token)
            )
            token = page.next_page_token
            if not token:
                break
        step = max(1, len(ids) // SAMPLE)
        for turn_id in ids[::step]:
            after = 0
            while True:
                events = await stub.ListEvents(
                    turns_pb2.ListEventsRequest(turn_id=turn_id, after_seq=after, page_size=1000)
                )
                seen += len(events.events)
                if not events.events:
                    break
                after = events.events[-1].seq
        for turn_id in ids[step // 2 :: step]:
            # The turns are DONE but hold no terminal event: read the replay, then hang up.
            call = stub.WatchTurn(turns_pb2.WatchTurnRequest(turn_id=turn_id))
            got = 0
            async for _frame in call:
                got += 1
                if got >= spec.events_per_turn:
                    break
            call.cancel()
            seen += got
    return seen


def run(size: Size) -> Section:
    per_turn = max(1, size.memory_events // size.memory_turns)
    spec = populate.TurnSpec(size.memory_turns, events_per_turn=per_turn)
    section = Section(
        key="memory",
        title="Service memory",
        method=(
            f"turns.db filled directly with {size.memory_turns:,} turns and "
            f"{size.memory_turns * per_turn:,} retained events (~100 bytes of JSON each). "
            "The service starts in its own process (no NATS); RSS is read once it "
            f"listens, then after TurnStatus for every turn, ListTurns through all of them, "
            f"ListEvents through {SAMPLE} turns and WatchTurn replays of {SAMPLE} others."
        ),
    )
    with scratch_dir("memory") as data_dir:
        populate.fill(data_dir, spec)
        db_bytes = sum(p.stat().st_size for p in data_dir.glob("*.db*"))
        with ServerProcess(data_dir) as server:
            idle, _ = read_rss(server.pid)
            seen = asyncio.run(_reads(server.address, spec))
            rss, peak = read_rss(server.pid)
    section.metrics = {
        "rss_idle_mb": idle / MB,
        "rss_mb": rss / MB,
        "peak_mb": peak / MB,
        "db_mb": db_bytes / MB,
        "events_read": float(seen),
    }
    section.rows = [
        Row("RSS after the reads", f"{rss / MB:,.0f} MB", target="≤ 250 MB", met=rss <= 250 * MB),
        Row("peak RSS (VmHWM)", f"{peak / MB:,.0f} MB"),
        Row("RSS when it starts listening", f"{idle / MB:,.0f} MB"),
        Row("size of turns.db + sessions.db on disk", f"{db_bytes / MB:,.0f} MB"),
    ]
    return section
