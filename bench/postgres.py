"""The service on PostgreSQL beside SQLite, in one run: ``python -m bench.postgres``.

- RemoteSaver turns (bench/turns.py's 4-node graph) through a service on SQLite
  and through one on PostgreSQL (pgserver's PostgreSQL 16, on a Unix socket):
  per-turn time one after the other, turns/s with concurrent callers, service CPU
  per turn;
- TurnStatus calls/s, closed loop, on each backend;
- one replica vs two on one PostgreSQL, each replica pinned to a core of its own:
  aggregate turns/s and service CPU per turn, the client given both addresses
  (round_robin);
- the cross-replica WatchTurn delay: an event appended through replica B, seen by
  a WatchTurn on replica A (beside the same-replica figure);
- what one turn costs PostgreSQL (transactions and rows written, from
  pg_stat_database), the base of the paper estimate in docs/benchmarks.md.

Prints a Markdown table; ``--smoke`` runs tiny sizes (it only checks the code runs).

Every benchmark on PostgreSQL makes its databases through ``postgres()``: in a
throwaway cluster of its own, or, with ``TURNKEEPER_BENCH_POSTGRES`` set to the URL of
a running one (a database there; the user may create databases), in that cluster,
dropped afterwards: the tests pass their session's (decision 460).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
from pgserver.postgres_server import get_server
from turnkeeper.agent.saver import RemoteSaver
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.v1 import turns_pb2 as pb

from bench import saver, turns
from bench.common import ServerProcess, cpu_delta, cpu_seconds, percentile, scratch_dir


@dataclass(frozen=True)
class Sizes:
    single: int
    concurrent: int
    callers: int
    status_seconds: float
    status_callers: int
    watch_samples: int


FULL = Sizes(
    single=60, concurrent=240, callers=8, status_seconds=4.0, status_callers=16, watch_samples=200
)
SMOKE = Sizes(
    single=3, concurrent=8, callers=2, status_seconds=0.3, status_callers=2, watch_samples=5
)


class Replica(ServerProcess):
    """The bench's service process, on PostgreSQL when given a database URL (the
    service reads it from its environment, as a container would)."""

    def __init__(self, data_dir: Path, database_url: str | None) -> None:
        super().__init__(data_dir)
        self.database_url = database_url

    def start(self, timeout: float = 60.0) -> str:
        if self.database_url is None:
            return super().start(timeout)
        os.environ["TURNKEEPER_DATABASE_URL"] = self.database_url
        try:
            return super().start(timeout)
        finally:
            del os.environ["TURNKEEPER_DATABASE_URL"]


#: The URL of a running PostgreSQL to make the databases in, instead of a cluster.
CLUSTER_ENV = "TURNKEEPER_BENCH_POSTGRES"


@contextmanager
def postgres() -> Iterator[Callable[[], str]]:
    """A throwaway PostgreSQL (or the one CLUSTER_ENV names); yields a maker of
    fresh databases."""
    given = os.environ.get(CLUSTER_ENV)
    if given:
        with _databases_in(given) as in_given:
            yield in_given
        return
    root = Path(tempfile.mkdtemp(prefix="turnkeeper-bench-pg-"))
    server = get_server(root / "pgdata", cleanup_mode="delete")
    names = iter(range(1, 1000))

    def new_database() -> str:
        name = f"b{next(names)}"
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return str(server.get_uri(name))

    try:
        yield new_database
    finally:
        server.cleanup()


@contextmanager
def _databases_in(url: str) -> Iterator[Callable[[], str]]:
    """Fresh databases in the running cluster at `url`, named after this process and
    dropped when the block ends."""
    made: list[str] = []

    def new_database() -> str:
        name = f"bench_{os.getpid()}_{len(made) + 1}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        made.append(name)
        return urlsplit(url)._replace(path=f"/{name}").geturl()

    try:
        yield new_database
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            for name in made:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def saver_figures(address: str, pids: list[int], size: Sizes) -> dict[str, float]:
    """Per-turn seconds (single), turns/s and service CPU ms per turn (concurrent)."""
    with RemoteSaver.from_address(address) as saver:
        turn = turns.graph_turn(turns.build(saver))
        single = turns.single(turn, size.single)
        before = [cpu_seconds(p) for p in pids]
        started = time.perf_counter()
        with ThreadPoolExecutor(size.callers) as pool:
            for future in [pool.submit(turn) for _ in range(size.concurrent)]:
                future.result()
        elapsed = time.perf_counter() - started
        used = sum(
            sum(cpu_delta(b, cpu_seconds(p)).values()) for b, p in zip(before, pids, strict=True)
        )
    return {
        "single_s": single,
        "tps": size.concurrent / elapsed,
        "service_cpu_ms": used * 1e3 / size.concurrent,
    }


async def status_rate(address: str, size: Sizes) -> float:
    """TurnStatus calls/s with ``status_callers`` callers in a closed loop."""
    async with AsyncTurnkeeperClient(ConnectionOptions(target=address)) as client:
        await client.start_turn(
            pb.StartTurnRequest(turn_id="status", thread_id="status", agent="bench")
        )
        request = pb.TurnStatusRequest(turn_id="status")
        calls = 0
        stop_at = time.perf_counter() + size.status_seconds

        async def caller() -> None:
            nonlocal calls
            while time.perf_counter() < stop_at:
                await client.turn_status(request)
                calls += 1

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(size.status_callers)))
        return calls / (time.perf_counter() - started)


def async_figures(address: str, size: Sizes) -> dict[str, float]:
    """As the bridge runs turns (``ainvoke``, the checkpoint stream): per-turn seconds
    one after the other, and turns/s with ``callers`` tasks on one loop."""
    return {
        "single_s": saver.async_run(address, True, size.single),
        "tps": saver.async_run(address, True, size.concurrent, size.callers),
    }


async def watch_delays(watch_on: str, append_on: str, size: Sizes, turn_id: str) -> list[float]:
    """Seconds from sending an AppendEvents (through ``append_on``) to its frame on a
    WatchTurn (on ``watch_on``), one event at a time."""
    async with (
        AsyncTurnkeeperClient(ConnectionOptions(target=watch_on)) as watcher,
        AsyncTurnkeeperClient(ConnectionOptions(target=append_on)) as writer,
    ):
        await writer.start_turn(pb.StartTurnRequest(turn_id=turn_id, thread_id=turn_id, agent="b"))
        frames: asyncio.Queue[float] = asyncio.Queue()

        async def watch() -> None:
            async for _ in watcher.watch_turn(pb.WatchTurnRequest(turn_id=turn_id)):
                frames.put_nowait(time.perf_counter())

        watching = asyncio.create_task(watch())
        # The first event proves the stream is open before anything is timed.
        await writer.append_events(
            pb.AppendEventsRequest(
                turn_id=turn_id, attempt=0, events=[pb.EventInput(seq=1, type="t", data_json="{}")]
            )
        )
        await asyncio.wait_for(frames.get(), 30)
        delays = []
        for seq in range(2, size.watch_samples + 2):
            sent = time.perf_counter()
            await writer.append_events(
                pb.AppendEventsRequest(
                    turn_id=turn_id,
                    attempt=0,
                    events=[pb.EventInput(seq=seq, type="t", data_json="{}")],
                )
            )
            delays.append(await asyncio.wait_for(frames.get(), 30) - sent)
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        return delays


def pin(pid: int, cores: set[int]) -> None:
    """Every thread of process `pid` on `cores` (threads it starts later inherit)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cores)
        except ProcessLookupError:
            continue  # the thread ended meanwhile


def pg_counters(database_url: str) -> dict[str, int]:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit, tup_inserted, tup_updated, tup_deleted, tup_fetched "
            "FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    keys = ("commits", "inserted", "updated", "deleted", "fetched")
    return dict(zip(keys, (int(v) for v in row), strict=True))


def run(size: Sizes) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, str, str]] = []
    with ExitStack() as stack:
        new_database = stack.enter_context(postgres())
        data = stack.enter_context(scratch_dir("pg"))
        sqlite = stack.enter_context(Replica(_dir(data, "sqlite"), None))
        database = new_database()
        one = stack.enter_context(Replica(_dir(data, "pg1"), database))
        # SQLite and PostgreSQL, one replica each.
        lite = saver_figures(sqlite.address, [sqlite.pid], size)
        before = pg_counters(database)
        pg = saver_figures(one.address, [one.pid], size)
        # Row and commit counters are flushed lazily: let the backends report.
        time.sleep(1.5)
        after = pg_counters(database)
        turns_run = size.single + 1 + size.concurrent
        per_turn = {k: (after[k] - before[k]) / turns_run for k in before}
        rows += [
            ("RemoteSaver turn, one after the other", _ms(lite["single_s"]), _ms(pg["single_s"])),
            (
                f"RemoteSaver turns/s, {size.callers} callers",
                f"{lite['tps']:.0f}",
                f"{pg['tps']:.0f}",
            ),
            (
                "service CPU per turn",
                f"{lite['service_cpu_ms']:.1f} ms",
                f"{pg['service_cpu_ms']:.1f} ms",
            ),
            (
                f"TurnStatus calls/s, {size.status_callers} callers",
                f"{asyncio.run(status_rate(sqlite.address, size)):.0f}",
                f"{asyncio.run(status_rate(one.address, size)):.0f}",
            ),
            (
                "PostgreSQL per turn: commits / rows inserted / updated / deleted / fetched",
                "—",
                " / ".join(f"{per_turn[k]:.1f}" for k in per_turn),
            ),
        ]
        # The async API on its checkpoint stream: a step's writes and checkpoint
        # commit in one transaction on PostgreSQL too (decision 149).
        lite_async = async_figures(sqlite.address, size)
        before = pg_counters(database)
        pg_async = async_figures(one.address, size)
        time.sleep(1.5)
        after = pg_counters(database)
        # Each async_run warms up with one turn per caller (one for the single).
        async_turns = size.single + 1 + size.concurrent + size.callers
        rows += [
            (
                "RemoteSaver async turn (stream), one after the other",
                _ms(lite_async["single_s"]),
                _ms(pg_async["single_s"]),
            ),
            (
                f"RemoteSaver async turns/s (stream), {size.callers} tasks",
                f"{lite_async['tps']:.0f}",
                f"{pg_async['tps']:.0f}",
            ),
            (
                "PostgreSQL commits per async turn",
                "—",
                f"{(after['commits'] - before['commits']) / async_turns:.1f}",
            ),
        ]
        # One replica vs two on one database, each replica's threads on a core of
        # its own (as `taskset -a` would): the second replica's Python gets a core
        # the first one's does not use.
        two_db = new_database()
        a = stack.enter_context(Replica(_dir(data, "pg2a"), two_db))
        b = stack.enter_context(Replica(_dir(data, "pg2b"), two_db))
        cores = sorted(os.sched_getaffinity(0))
        pin(a.pid, {cores[0]})
        pin(b.pid, {cores[-1]})
        solo = saver_figures(a.address, [a.pid], size)
        pair = saver_figures(f"{a.address},{b.address}", [a.pid, b.pid], size)
        rows += [
            (
                f"PostgreSQL: turns/s, {size.callers} callers, 1 replica vs 2 (each pinned "
                "to a core of its own)",
                f"{solo['tps']:.0f} (1)",
                f"{pair['tps']:.0f} (2)",
            ),
            (
                "PostgreSQL: service CPU per turn, 1 replica vs 2 (summed)",
                f"{solo['service_cpu_ms']:.1f} ms (1)",
                f"{pair['service_cpu_ms']:.1f} ms (2)",
            ),
        ]
        same = asyncio.run(watch_delays(a.address, a.address, size, "w-same"))
        cross = asyncio.run(watch_delays(a.address, b.address, size, "w-cross"))
        rows.append(
            (
                "WatchTurn: append sent -> frame seen, median / p95",
                f"same replica {_ms(statistics.median(same))} / {_ms(percentile(same, 95))}",
                f"other replica {_ms(statistics.median(cross))} / {_ms(percentile(cross, 95))}",
            )
        )
    return rows


def _dir(parent: Path, name: str) -> Path:
    path = parent / name
    path.mkdir(exist_ok=True)
    return path


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.postgres", description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: only that it runs")
    args = parser.parse_args()
    rows = run(SMOKE if args.smoke else FULL)
    print("| | SQLite | PostgreSQL |")
    print("|---|---|---|")
    for what, left, right in rows:
        print(f"| {what} | {left} | {right} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
