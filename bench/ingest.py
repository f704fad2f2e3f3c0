"""Event ingest: AppendEvents batches, durable (acknowledged after fsync), retained
in turns.db and mirrored to a real nats-server through the outbox; against raw
batched inserts of the same rows into the same schema, in-process.

Two rates for the service: *acknowledged* (every AppendEvents answered, so every
event is durable and retained) and *mirrored* (every event also received by a NATS
subscriber, so the outbox has drained). The target is held against the mirrored
one: an event is ingested once it is everywhere it has to be.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from google.protobuf import struct_pb2
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.store.outbox_rows import SEPARATOR

from bench import populate
from bench.common import (
    Row,
    Section,
    ServerProcess,
    Size,
    cpu_delta,
    cpu_seconds,
    fmt_rate,
    fmt_ratio,
    median,
    nats_server,
    paired_ratio,
    scratch_dir,
)
from bench.nats_count import MessageCounter

SUBJECT = "vystak.turn.events.>"


def _requests(size: Size, round_: int) -> list[list[turns_pb2.AppendEventsRequest]]:
    """Every turn's batches, built before the clock starts."""
    out = []
    for t in range(size.ingest_turns):
        turn_id = f"ingest-{round_}-{t}"
        batches = []
        for b in range(size.ingest_batches):
            first = b * size.ingest_batch + 1
            events = [
                turns_pb2.EventInput(
                    seq=first + i, type=populate.EVENT_TYPE, data_json=populate.EVENT_DATA
                )
                for i in range(size.ingest_batch)
            ]
            batches.append(turns_pb2.AppendEventsRequest(turn_id=turn_id, attempt=0, events=events))
        out.append(batches)
    return out


async def _stream_writer(
    stub: checkpoints_pb2_grpc.CheckpointServiceAsyncStub,
    batches: list[turns_pb2.AppendEventsRequest],
) -> None:
    """A turn's batches as `append` messages on one CheckpointStream, sent without
    waiting (the service still answers each after its commit, in order)."""
    requests = [
        checkpoints_pb2.CheckpointStreamRequest(id=n, append=batch)
        for n, batch in enumerate(batches, start=1)
    ]
    answers = [a async for a in stub.CheckpointStream(iter(requests))]
    if len(answers) != len(requests) or any(a.HasField("error") for a in answers):
        raise RuntimeError(f"the stream answered {len(answers)} of {len(requests)} batches")


async def _service_round(
    address: str, nats_url: str, size: Size, round_: int, pid: int, stream: bool = False
) -> tuple[float, float, dict[str, float]]:
    """(acknowledged events/s, mirrored events/s, the service's CPU seconds by thread);
    `stream`: each turn's batches on a CheckpointStream instead of AppendEvents calls."""
    total = size.ingest_turns * size.ingest_batches * size.ingest_batch
    counter = MessageCounter(nats_url, SUBJECT)
    await counter.start()
    try:
        requests = _requests(size, round_)
        async with aio.insecure_channel(address) as channel:
            stub = turns_pb2_grpc.TurnServiceStub(channel)
            for t, batches in enumerate(requests):
                await stub.StartTurn(
                    turns_pb2.StartTurnRequest(
                        turn_id=batches[0].turn_id,
                        thread_id=f"ingest-thread-{round_}-{t}",
                        agent="bench",
                        input=struct_pb2.Value(string_value="go"),
                        replica="bench",
                        incarnation="i1",
                    )
                )

            checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)

            async def writer(batches: list[turns_pb2.AppendEventsRequest]) -> None:
                if stream:
                    await _stream_writer(checkpoints, batches)
                    return
                for request in batches:
                    await stub.AppendEvents(request)

            cpu = cpu_seconds(pid)
            started = time.perf_counter()
            await asyncio.gather(*(writer(b) for b in requests))
            acked = time.perf_counter() - started
            await asyncio.wait_for(counter.wait_for(total), timeout=max(60.0, acked * 20))
            mirrored = time.perf_counter() - started
            cpu = cpu_delta(cpu, cpu_seconds(pid))
    finally:
        await counter.close()
    return total / acked, total / mirrored, cpu


def _raw_round(data_dir: Path, size: Size, outbox: bool = False) -> float:
    """Events/s of batched inserts into the events table, a transaction per batch,
    WAL and synchronous=FULL like the service; with `outbox`, each batch's outbox row
    too (the row the service writes on SQLite, without the service: decision 154)."""
    populate.create_schema(data_dir)
    conn = populate.connect(data_dir, synchronous="FULL")
    now = time.time()
    rows = [
        [
            (
                f"raw-{t}",
                b * size.ingest_batch + i + 1,
                0,
                populate.EVENT_TYPE,
                populate.EVENT_DATA,
                now,
            )
            for i in range(size.ingest_batch)
        ]
        for t in range(size.ingest_turns)
        for b in range(size.ingest_batches)
    ]
    try:
        started = time.perf_counter()
        for batch in rows:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO main.events (turn_id, seq, attempt, type, data_json, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                batch,
            )
            if outbox:
                conn.execute(
                    "INSERT INTO main.outbox (subject, payload, created_at, messages) "
                    "VALUES (?, ?, ?, ?)",
                    (
                        f"vystak.turn.events.{batch[0][0]}",
                        SEPARATOR.join(r[4].encode() for r in batch),
                        now,
                        len(batch),
                    ),
                )
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - started
    finally:
        conn.close()
    return sum(len(b) for b in rows) / elapsed


def run(size: Size) -> Section:
    total = size.ingest_turns * size.ingest_batches * size.ingest_batch
    section = Section(
        key="ingest",
        title="Event ingest",
        method=(
            f"{size.ingest_turns} turns append at once, each {size.ingest_batches} "
            f"AppendEvents batches of {size.ingest_batch} token events (~100 bytes of JSON "
            f"each): {total:,} events per round, {size.ingest_rounds} rounds; values are medians, ratios medians of each round's ratio. "
            "The service runs in its own process (synchronous=FULL) with a real "
            "nats-server; a subscriber in the load generator counts the mirrored events "
            "(bench/nats_count.py: a bare protocol reader, a few µs per message). "
            "Baseline, in the same round: the same number of rows inserted into the same "
            "`events` table in-process with `executemany`, one transaction per batch, WAL, "
            "synchronous=FULL. The CheckpointStream rows: the same batches, each turn's "
            "sent as `append` messages on one stream without waiting for each answer, "
            "against a fresh service in the same round."
        ),
    )
    acked: list[float] = []
    mirrored: list[float] = []
    s_acked: list[float] = []
    s_mirrored: list[float] = []
    raw: list[float] = []
    raw_outbox: list[float] = []
    cpu_us: dict[str, list[float]] = {}
    for round_ in range(size.ingest_rounds):
        with scratch_dir("ingest-raw") as raw_dir:
            raw.append(_raw_round(raw_dir, size))
        with scratch_dir("ingest-raw-outbox") as raw_dir:
            raw_outbox.append(_raw_round(raw_dir, size, outbox=True))
        with (
            scratch_dir("ingest") as data_dir,
            nats_server() as url,
            ServerProcess(data_dir, nats_url=url) as server,
        ):
            a, m, cpu = asyncio.run(_service_round(server.address, url, size, round_, server.pid))
        with (
            scratch_dir("ingest-stream") as data_dir,
            nats_server() as url,
            ServerProcess(data_dir, nats_url=url) as server,
        ):
            sa, sm, _ = asyncio.run(
                _service_round(server.address, url, size, round_, server.pid, stream=True)
            )
        s_acked.append(sa)
        s_mirrored.append(sm)
        acked.append(a)
        mirrored.append(m)
        for kind, seconds in cpu.items():
            cpu_us.setdefault(kind, []).append(seconds / total * 1e6)
    m_acked, m_mirrored, m_raw = median(acked), median(mirrored), median(raw)
    cpu = {kind: median(values) for kind, values in cpu_us.items()}
    section.metrics = {
        "acked_eps": m_acked,
        "mirrored_eps": m_mirrored,
        "raw_eps": m_raw,
        "raw_outbox_eps": median(raw_outbox),
        "stream_acked_eps": median(s_acked),
        "stream_mirrored_eps": median(s_mirrored),
    }
    section.metrics |= {f"cpu_us_per_event_{k}": v for k, v in cpu.items() if v > 0}
    r = paired_ratio(mirrored, raw)
    section.metrics |= {"mirrored_ratio": r, "acked_ratio": paired_ratio(acked, raw)}
    section.rows = [
        Row(
            "events/s, durable + retained + mirrored to NATS",
            fmt_rate(m_mirrored),
            "—",
            "—",
            "≥ 50,000/s",
            m_mirrored >= 50_000,
        ),
        Row(
            "the same, against raw inserts in-process",
            fmt_rate(m_mirrored),
            fmt_rate(m_raw),
            fmt_ratio(r),
            "≥ 0.50\u00d7",
            r >= 0.5,
        ),
        Row(
            "events/s, acknowledged (durable + retained)",
            fmt_rate(m_acked),
            fmt_rate(m_raw),
            fmt_ratio(section.metrics["acked_ratio"]),
        ),
        Row(
            "events/s over CheckpointStream, durable + retained + mirrored",
            fmt_rate(median(s_mirrored)),
            f"AppendEvents {fmt_rate(m_mirrored)}",
            fmt_ratio(paired_ratio(s_mirrored, mirrored)),
        ),
        Row(
            "events/s over CheckpointStream, acknowledged",
            fmt_rate(median(s_acked)),
            f"AppendEvents {fmt_rate(m_acked)}",
            fmt_ratio(paired_ratio(s_acked, acked)),
        ),
        Row(
            "raw inserts with a batch's outbox row (what the service writes)",
            fmt_rate(median(raw_outbox)),
            fmt_rate(m_raw),
            fmt_ratio(paired_ratio(raw_outbox, raw)),
        ),
        Row(
            "service CPU per event (all threads)",
            f"{sum(cpu.values()):.1f} µs",
        ),
    ]
    section.notes.append(
        "Service CPU per event by thread: "
        f"event loop (gRPC handlers, validation, outbox publisher) {cpu.get('main', 0):.1f} µs, "
        f"other Python threads (the SQLite writer, gRPC's poller) {cpu.get('python', 0):.1f} µs, "
        f"gRPC core threads {cpu.get('native', 0):.1f} µs. The event loop's thread alone "
        f"bounds the rate at about {1e6 / max(1e-9, cpu.get('main', 0)):,.0f} events/s "
        "however idle the machine; the writer's time is partly SQLite's own, which runs "
        "without the GIL, so the two threads' sum is not a bound."
    )
    return section
