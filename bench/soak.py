"""`python -m bench.soak`: many short turns with retention on, and the size of the
database files as they go.

python -m bench.soak --turns 100000 --retention 2 --turn-retention 5 --checkpoints
python -m bench.soak --turns 300 --every 100 --out -  # a few seconds

A service runs in this process (create_server, SQLite in a temporary directory,
no NATS: the outbox rows wait for the sweep like they would for an absent NATS),
with a short retention and a short sweep interval. A few async callers run short
turns as fast as they can over gRPC: StartTurn, AppendEvents (a few events with
some text), with `--checkpoints` a checkpoint, FinishTurn, each on a thread of its
own. Every `--every` turns the files are measured: turns.db with its WAL,
sessions.db, the free-list pages, and the rows still held in the events, outbox and
turns tables.

Retention alone keeps every turn row (TurnStatus and GetTurn still answer for a
pruned turn), and each thread's latest checkpoint, so the files still grow by a
turn row (and a checkpoint) per turn; what levels off is what a turn carried (its
events, its outbox rows). With `--turn-retention` the turn rows go too, and each
thread with its last turn, so the files level off altogether.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpc import aio
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import create_server
from turnkeeper_server.config import Settings

from bench import report
from bench.report import REPO

EVENTS_PER_TURN = 4
# Some text per event, like a token chunk or a tool result.
EVENT_DATA = '{"text": "' + ("soak benchmark event text " * 8) + '"}'
SECTION = "## Retention soak"


@dataclass(frozen=True)
class Sample:
    turns: int
    seconds: float
    turns_db: int
    turns_wal: int
    sessions_db: int
    free_pages: int
    events: int
    outbox: int
    turn_rows: int

    @property
    def turns_total(self) -> int:
        return self.turns_db + self.turns_wal


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def measure(data: Path, turns: int, seconds: float) -> Sample:
    turns_path, sessions_path = data / "turns.db", data / "sessions.db"
    sessions = _size(sessions_path) + _size(Path(f"{sessions_path}-wal"))
    with sqlite3.connect(f"file:{turns_path}?mode=ro", uri=True) as db:
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        events = db.execute("SELECT count(*) FROM events").fetchone()[0]
        outbox = db.execute("SELECT count(*) FROM outbox").fetchone()[0]
        turn_rows = db.execute("SELECT count(*) FROM turns").fetchone()[0]
    db.close()
    return Sample(
        turns=turns,
        seconds=seconds,
        turns_db=_size(turns_path),
        turns_wal=_size(Path(f"{turns_path}-wal")),
        sessions_db=sessions,
        free_pages=free,
        events=events,
        outbox=outbox,
        turn_rows=turn_rows,
    )


# A small checkpoint, like a short conversation's state.
CHECKPOINT = b'{"messages": ["' + b"soak benchmark checkpoint text " * 8 + b'"]}'


async def _turn(
    stub: turns_pb2_grpc.TurnServiceAsyncStub,
    saver: checkpoints_pb2_grpc.CheckpointServiceAsyncStub | None,
    n: int,
) -> None:
    turn_id = f"soak-{n}"
    await stub.StartTurn(
        turns_pb2.StartTurnRequest(turn_id=turn_id, thread_id=turn_id, agent="soak")
    )
    events = [
        turns_pb2.EventInput(seq=i, type="soak.chunk", data_json=EVENT_DATA)
        for i in range(1, EVENTS_PER_TURN + 1)
    ]
    await stub.AppendEvents(
        turns_pb2.AppendEventsRequest(turn_id=turn_id, attempt=0, events=events)
    )
    if saver is not None:
        await saver.PutCheckpoint(
            checkpoints_pb2.PutCheckpointRequest(
                thread_id=turn_id,
                checkpoint_id=f"{n:012d}",
                checkpoint=checkpoints_pb2.TypedValue(type="json", data=CHECKPOINT),
                metadata_json='{"source": "loop", "step": 1}',
                fence=checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=0),
            )
        )
    await stub.FinishTurn(
        turns_pb2.FinishTurnRequest(turn_id=turn_id, attempt=0, outcome=turns_pb2.OUTCOME_DONE)
    )


async def _drained(
    data: Path, turns: int, started: float, retention: float, interval: float, turn_retention: float
) -> Sample:
    """The files once the sweeper has taken every turn's events (and, with a turn
    horizon, every turn): polled (the sweep is a timer inside the service, with
    nothing a client could await), up to a bound."""
    deadline = time.monotonic() + max(retention, turn_retention) + 50 * interval + 30.0
    while True:
        sample = measure(data, turns, time.perf_counter() - started)
        done = sample.events == 0 and (turn_retention <= 0 or sample.turn_rows == 0)
        if done or time.monotonic() > deadline:
            return sample
        await asyncio.sleep(interval)


async def soak(
    data: Path,
    turns: int,
    every: int,
    callers: int,
    retention: float,
    interval: float,
    drain: bool = True,
    turn_retention: float = 0.0,
    checkpoints: bool = False,
) -> list[Sample]:
    """Samples every `every` turns; with `drain`, one more once the sweeper has taken
    every finished turn's events, or with `turn_retention` every turn (the floor the
    files settle to). `checkpoints`: each turn writes one checkpoint."""
    settings = Settings(
        turns_path=data / "turns.db",
        sessions_path=data / "sessions.db",
        listen="127.0.0.1:0",
        lease_seconds=3600.0,
        retention_seconds=retention,
        turn_retention_seconds=turn_retention,
        retention_interval=interval,
    )
    server = await create_server(settings)
    samples: list[Sample] = []
    try:
        async with aio.insecure_channel(server.address) as channel:
            stub: turns_pb2_grpc.TurnServiceAsyncStub = turns_pb2_grpc.TurnServiceStub(channel)
            saver: checkpoints_pb2_grpc.CheckpointServiceAsyncStub | None = (
                checkpoints_pb2_grpc.CheckpointServiceStub(channel) if checkpoints else None
            )
            numbers = iter(range(turns))
            done = 0
            started = time.perf_counter()
            next_mark = every

            async def caller() -> None:
                nonlocal done, next_mark
                for n in numbers:
                    await _turn(stub, saver, n)
                    done += 1
                    if done >= next_mark:
                        next_mark += every
                        elapsed = time.perf_counter() - started
                        samples.append(measure(data, done, elapsed))
                        print(_line(samples[-1]), flush=True)

            await asyncio.gather(*(caller() for _ in range(callers)))
            if drain:
                samples.append(
                    await _drained(data, done, started, retention, interval, turn_retention)
                )
                print(_line(samples[-1]) + "  (drained)", flush=True)
    finally:
        await server.stop(0)
    return samples


def _line(s: Sample) -> str:
    return (
        f"{s.turns:>8,} turns {s.seconds:7.1f} s  turns.db {s.turns_db / 1e6:7.2f} MB"
        f" + WAL {s.turns_wal / 1e6:6.2f} MB  sessions.db {s.sessions_db / 1e6:5.2f} MB"
        f"  free pages {s.free_pages:>6,}  events {s.events:>7,}  outbox {s.outbox:>6,}"
        f"  turn rows {s.turn_rows:>7,}"
    )


def _slope(a: Sample, b: Sample, size: Callable[[Sample], int]) -> float:
    """Bytes of a file (with its WAL) per turn between two samples."""
    return (size(b) - size(a)) / max(1, b.turns - a.turns)


def _turns_size(s: Sample) -> int:
    return s.turns_total


def _sessions_size(s: Sample) -> int:
    return s.sessions_db


def _at(samples: list[Sample], turns: int) -> Sample:
    return min(samples, key=lambda s: abs(s.turns - turns))


def render(
    samples: list[Sample], args: argparse.Namespace, where: dict[str, str] | None = None
) -> str:
    floor = samples[-1] if args.drain else None
    if floor is not None:
        samples = samples[:-1]
    last = samples[-1]
    mid = _at(samples, last.turns // 2)
    first = samples[0]
    horizon = getattr(args, "turn_retention", 0.0)
    checkpoints = getattr(args, "checkpoints", False)
    rows = [
        "| Turns | Elapsed | turns.db | WAL | sessions.db | Free pages | Events held "
        "| Outbox held | Turn rows held |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]

    def row(s: Sample, label: str) -> str:
        return (
            f"| {label} | {s.seconds:,.0f} s | {s.turns_db / 1e6:.2f} MB "
            f"| {s.turns_wal / 1e6:.2f} MB | {s.sessions_db / 1e6:.2f} MB | {s.free_pages:,} "
            f"| {s.events:,} | {s.outbox:,} | {s.turn_rows:,} |"
        )

    report_every = max(args.every, args.report_every)
    for s in samples:
        if s.turns % report_every and s is not last:
            continue
        rows.append(row(s, f"{s.turns:,}"))
    if floor is not None:
        rows.append(row(floor, f"{floor.turns:,}, drained"))
    rate = last.turns / last.seconds
    command = (
        f"`python -m bench.soak --turns {args.turns} --retention {args.retention:g}"
        + (f" --turn-retention {horizon:g}" if horizon else "")
        + (" --checkpoints" if checkpoints else "")
        + f" --interval {args.interval:g} --callers {args.callers}`"
    )
    steps = f"StartTurn, AppendEvents of {EVENTS_PER_TURN} events of ~{len(EVENT_DATA)} bytes, " + (
        f"PutCheckpoint of ~{len(CHECKPOINT)} bytes, " if checkpoints else ""
    )
    tenth = _at(samples, last.turns // 10)
    sizes = ", ".join(
        f"{s.turns_total / 1e6:.2f} MB at {s.turns:,}" for s in dict.fromkeys((tenth, mid, last))
    )
    sessions = ", ".join(
        f"{s.sessions_db / 1e6:.2f} MB at {s.turns:,}" for s in dict.fromkeys((tenth, mid, last))
    )
    lines = [
        SECTION,
        "",
        f"{command}: {last.turns:,} short turns ({steps}FinishTurn; each on a thread of its "
        "own) against one service in the same process, SQLite, no NATS, retention "
        f"{args.retention:g} s"
        + (f" and turn retention {horizon:g} s," if horizon else "")
        + f" swept every {args.interval:g} s; {rate:,.0f} turns/s overall."
        + (
            f" Run on {datetime.date.today().isoformat()} at commit {where['commit']}, "
            f"load average at start {where['load average at start']}."
            if where
            else ""
        ),
        "",
        *rows,
        "",
        f"- turns.db with its WAL: {sizes}; it grew by "
        f"{_slope(first, mid, _turns_size):,.0f} bytes per turn from {first.turns:,} to "
        f"{mid.turns:,} turns and by {_slope(mid, last, _turns_size):,.0f} bytes per turn "
        f"from {mid.turns:,} to {last.turns:,}.",
        f"- sessions.db with its WAL: {sessions}; "
        f"{_slope(first, mid, _sessions_size):,.0f} and "
        f"{_slope(mid, last, _sessions_size):,.0f} bytes per turn over the same halves.",
        f"- Without retention each turn would leave at least its {EVENTS_PER_TURN} events "
        "(the service journals its own start and end events besides) and as many outbox "
        f"rows: over {last.turns * EVENTS_PER_TURN:,} event rows by the end; "
        f"{last.events:,} were still held (the last seconds' turns, not yet old enough).",
    ]
    if horizon:
        lines.append(
            f"- Past the turn horizon ({horizon:g} s) the turn rows go too, with their "
            "boundaries, and each thread with its last turn (its checkpoint included): "
            f"the turn rows held stay bounded by the turns of the last {horizon:g} s and "
            f"sweep interval ({last.turn_rows:,} at the end), and the files stop growing "
            "once the freed pages are being reused."
        )
    else:
        lines.append(
            "- What still grows is what retention keeps by design: the turn row (TurnStatus "
            "and GetTurn still answer for a pruned turn) and its index entries"
            + (", and each thread's latest checkpoint" if checkpoints else "")
            + ". The events and outbox rows held stay bounded by the turns of the last "
            "retention period and sweep interval."
        )
    if not checkpoints:
        lines.append(
            "- sessions.db does not move: these turns write no checkpoints (run with "
            "`--checkpoints` for one per turn)."
        )
    if floor is not None:
        kept = (
            f"{floor.turns_total / max(1, floor.turn_rows):,.0f} bytes of turns.db and WAL "
            "per turn row kept, "
            if floor.turn_rows
            else f"{floor.turn_rows:,} turn rows kept, "
        )
        lines.append(
            f"- The drained row: the same files once the sweeper had taken every turn "
            f"({kept}the WAL's fixed size and {floor.free_pages:,} free pages included: "
            "the last sweep's freed pages not yet given back when measured)."
        )
    lines.append("")
    return "\n".join(lines)


def write_section(path: Path, section: str) -> None:
    """Replace the soak's section of the report (or add it at the end)."""
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    start = text.find(SECTION)
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        end = text.find("\n## ", start + len(SECTION))
        tail = "" if end < 0 else text[end + 1 :]
        text = text[:start] + section + ("\n" + tail if tail else "")
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=5_000, help="measure every N turns")
    parser.add_argument("--report-every", type=int, default=10_000, help="table rows every N turns")
    parser.add_argument("--callers", type=int, default=8, help="turns in flight at once")
    parser.add_argument("--retention", type=float, default=2.0, help="seconds")
    parser.add_argument(
        "--turn-retention",
        type=float,
        default=0.0,
        help="seconds after which finished turns themselves are deleted (0: kept)",
    )
    parser.add_argument(
        "--checkpoints", action="store_true", help="each turn writes one checkpoint"
    )
    parser.add_argument("--interval", type=float, default=0.5, help="sweep interval, seconds")
    parser.add_argument(
        "--no-drain",
        dest="drain",
        action="store_false",
        help="stop at the last turn instead of waiting for the sweeper to take every turn",
    )
    parser.add_argument(
        "--out",
        default=str(REPO / "docs" / "benchmarks.md"),
        help="the Markdown report the section goes into; '-': print it only",
    )
    args = parser.parse_args(argv)
    if args.turns < args.every:
        parser.error("--turns must be at least --every")
    if 0 < args.turn_retention < args.retention:
        parser.error("--turn-retention must be at least --retention (as the service's own flags)")
    where = report.machine()
    with tempfile.TemporaryDirectory(prefix="turnkeeper-bench-soak-") as tmp:
        samples = asyncio.run(
            soak(
                Path(tmp),
                args.turns,
                args.every,
                args.callers,
                args.retention,
                args.interval,
                args.drain,
                args.turn_retention,
                args.checkpoints,
            )
        )
    section = render(samples, args, where)
    if args.out == "-":
        print(section)
    else:
        write_section(Path(args.out), section)
        print(f"wrote the section to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
