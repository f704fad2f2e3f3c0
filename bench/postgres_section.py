"""The PostgreSQL section of `python -m bench`: RemoteSaver on a service on PostgreSQL
against LangGraph's stock AsyncPostgresSaver in the graph's own process, on one
pgserver cluster (a database for each side), side by side in one run.

- single turns (`ainvoke`, `durability="sync"`), alternated block by block
  (decision 163), the ratio the median of the blocks' ratios;
- turns/s with 16 and 200 turns in flight (tasks on one event loop), in short
  alternated rounds (decision 165), the graph process's CPU use during the 200
  run; when it saturates a core, the 200 turns again over 2 processes per side;
- the service's CPU per turn on PostgreSQL against a service on SQLite, in the
  same rounds, and PostgreSQL's CPU per turn and the machine's busy cores;
- PostgreSQL commits per turn (`pg_stat_database.xact_commit`) of each side, and
  the service's round trips to PostgreSQL per turn (its `sendto` calls, counted by
  strace), both in untimed passes after the timed ones.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict

from bench import alternate, turns
from bench.common import (
    REPO_BENCH,
    Row,
    Section,
    Size,
    cpu_delta,
    cpu_seconds,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    median,
    paired_ratio,
    ratio,
    scratch_dir,
)
from bench.postgres import Replica, postgres
from bench.postgres_worker import STOCK_POOL_SIZE, side_turn

Turn = Callable[[], Awaitable[None]]

# A graph process using this share of one core or more has saturated: the 200 turns
# then run again spread over PROCESSES processes per side.
SATURATED = 0.9
PROCESSES = 2


async def _warm(turn: Turn, callers: int) -> None:
    await asyncio.gather(*(turn() for _ in range(callers)))


def _commits(counters_url: str, databases: list[str]) -> dict[str, int]:
    """`xact_commit` of each database, read through a database of its own (so the
    reads' own transactions are counted there, not in the figures)."""
    with psycopg.connect(counters_url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        rows = conn.execute(
            "SELECT datname, xact_commit FROM pg_stat_database WHERE datname = ANY(%s)",
            (databases,),
        ).fetchall()
    return {str(name): int(commits) for name, commits in rows}


# A backend that reported its counts less than a second before going idle reports the
# rest once it has been idle this long (PostgreSQL's PGSTAT_IDLE_INTERVAL, 10 s), plus
# a margin for the report's own retry (decision 264).
STATS_REPORTED = 11.0


def _commits_reported(
    counters_url: str, databases: list[str], quiet: float, since: dict[str, int] | None
) -> dict[str, int]:
    """`_commits` after `quiet` seconds, and, given the reading before a pass, not
    before every database's count has moved past it (up to STATS_REPORTED seconds of
    quiet): a count read early may hold none of the pass, and a size whose wait is too
    short for exact counts still reads the pass's commits."""
    started = time.monotonic()
    time.sleep(quiet)
    while True:
        reading = _commits(counters_url, databases)
        moved = since is None or all(reading[db] > since[db] for db in databases)
        if moved or time.monotonic() - started >= STATS_REPORTED:
            return reading
        time.sleep(0.2)


def _postmaster(database_url: str) -> int:
    """The cluster's postmaster: the parent of a backend."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        # Read while the backend lives: it ends with the connection.
        status = Path(f"/proc/{row[0]}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))


def _cluster_cpu(postmaster: int) -> float:
    """CPU seconds used by the postmaster and its live children (the backends, the
    WAL writer, the checkpointer), from /proc (Linux)."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        if stat.parent.name == str(postmaster) or fields[1] == str(postmaster):
            used += int(fields[11]) + int(fields[12])
    return used / ticks


def _machine_busy() -> float:
    """CPU seconds every core of the machine has spent busy (not idle or waiting on
    I/O) since boot, from /proc/stat."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _dbname(url: str) -> str:
    return str(conninfo_to_dict(url)["dbname"])


def _runner(host: alternate.AsyncHost, turn: Turn, count: int, callers: int) -> Callable[[], None]:
    """Runs `count` turns, `callers` at once, on the host's loop, when called."""

    def run() -> None:
        host.call(turns.async_callers(turn, count, callers))

    return run


_CALL = re.compile(r"(sendto|recvfrom)\(\d+<([A-Z-]+):\[(\d+)->(\d+)\]>.*= (-?\d+)")


def _unix_paths() -> dict[str, str]:
    """Inode -> path of every Unix socket with a path (an accepted connection
    carries its listening socket's path, PostgreSQL's `.s.PGSQL.<port>`)."""
    paths = {}
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            paths[fields[6]] = fields[7]
    return paths


def _socket_calls(pid: int, run: Callable[[], None]) -> dict[str, int] | str:
    """The `sendto` system calls process `pid` (every thread) makes while `run` runs,
    traced by strace and sorted by where they went: `postgres` (a Unix socket whose
    peer is PostgreSQL's), `tcp`, and `other` (asyncio's wake-up socketpair: a loop
    woken from another thread); and `answers`, its `recvfrom` calls that read bytes
    from PostgreSQL's sockets. A string says why they could not be counted."""
    strace = shutil.which("strace")
    if strace is None:
        return "strace is not installed"
    with tempfile.NamedTemporaryFile(prefix="turnkeeper-bench-strace-", suffix=".txt") as out:
        tracer = subprocess.Popen(
            [
                strace,
                "-f",
                "-yy",
                "-s",
                "0",
                "-e",
                "trace=sendto,recvfrom",
                "-o",
                out.name,
                "-p",
                f"{pid}",
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        assert tracer.stderr is not None
        first = tracer.stderr.readline()
        if "attached" not in first:
            tracer.kill()
            tracer.wait()
            return f"strace could not attach ({(first + tracer.stderr.read()).strip()[:200]})"
        try:
            run()
            paths = _unix_paths()
        finally:
            tracer.send_signal(signal.SIGINT)
            tracer.communicate(timeout=30)
        counts = {"postgres": 0, "tcp": 0, "other": 0, "answers": 0}
        for line in Path(out.name).read_text().splitlines():
            if "resumed>" in line or (found := _CALL.search(line)) is None:
                if "sendto(" in line and "resumed>" not in line:
                    counts["other"] += 1
                continue
            call, kind, _, peer, result = found.groups()
            to_postgres = ".s.PGSQL." in paths.get(peer, "")
            if call == "recvfrom":
                counts["answers"] += to_postgres and int(result) > 0
            elif kind.startswith("TCP"):
                counts["tcp"] += 1
            elif to_postgres:
                counts["postgres"] += 1
            else:
                counts["other"] += 1
    return counts


def _spread(side: str, target: str, count: int, callers: int) -> tuple[float, float]:
    """`count` turns with `callers` in flight over PROCESSES graph processes (each
    its own event loop, started together after warming up): (turns/s, the graph
    processes' CPU seconds)."""
    workers: list[subprocess.Popen[str]] = []
    try:
        # One at a time: the stock saver's `setup()` is not safe to run concurrently.
        for _ in range(PROCESSES):
            worker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.postgres_worker",
                    side,
                    target,
                    str(count // PROCESSES),
                    str(callers // PROCESSES),
                ],
                cwd=REPO_BENCH.parent,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            workers.append(worker)
            assert worker.stdout is not None
            if worker.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a {side} graph process did not start")
        started = time.perf_counter()
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        cpu = 0.0
        for worker in workers:
            assert worker.stdout is not None
            cpu += float(json.loads(worker.stdout.readline())["cpu"])
        elapsed = time.perf_counter() - started
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
            worker.wait()
    return PROCESSES * (count // PROCESSES) / elapsed, cpu


def run(size: Size) -> Section:
    few, many = size.pg_callers
    section = Section(
        key="postgres",
        title="PostgreSQL: RemoteSaver vs the stock AsyncPostgresSaver",
        method=(
            'A 4-node linear graph over ~2 KB of state, `ainvoke` with `durability="sync"`, '
            "a new thread per turn. turnkeeper: RemoteSaver on its checkpoint stream (what "
            "the bridge runs), the service in its own process on PostgreSQL 16 (pgserver, "
            "a Unix socket). Stock: LangGraph's AsyncPostgresSaver in the graph's process, "
            "set up as langgraph-checkpoint-postgres's docs do (an AsyncConnectionPool of "
            f"max_size={STOCK_POOL_SIZE} with autocommit, prepare_threshold=0 and dict rows; "
            "`setup()` once; decision 261), on another database of the same "
            f"cluster. Single: {size.pg_blocks} blocks of {size.pg_block} turns of each side, "
            "the order reversed from block to block; a figure is the median of all its "
            "turns, a ratio the median of the blocks' ratios (decision 163). Concurrent: "
            f"{size.pg_rounds} rounds, each running every variant once ({size.pg_turns} turns "
            f"with {few} in flight, {size.pg_turns_many} with {many}; tasks on one event "
            "loop), the order reversed from round to round; a figure is the median of the "
            "rounds, a ratio the median of the rounds' ratios (decision 165). Service CPU "
            f"per turn: the {few}-in-flight runs, against the same turns through a "
            "service on SQLite in the same rounds. Graph process CPU: this process's CPU "
            f"seconds over the wall seconds of the {many}-in-flight runs (1.0 = one core); "
            f"at {SATURATED:.0%} or more the {many} turns run again over {PROCESSES} "
            f"processes per side (decision 263). In the same runs: PostgreSQL's "
            "CPU per turn (the postmaster and its live children, from /proc; both sides "
            "share the cluster but never run at once) and the machine's busy cores (from "
            "/proc/stat, whatever else runs on it). Commits: "
            "`pg_stat_database.xact_commit` of each side's database, read from a third "
            f"database after {size.pg_stats_wait:g} s of quiet, around {size.pg_count_turns} "
            f"turns of each side, one after the other and {few} in flight "
            "(decision 264). Round trips: the service's `sendto` calls (libpq's sends; gRPC "
            f"writes with sendmsg) counted by `strace -f -c` over {size.pg_count_turns} "
            "turns (decision 262). Commits and round trips come from untimed "
            "passes after the timed ones."
        ),
    )
    m = section.metrics
    conc_names = ("tk_few", "stock_few", "lite_few", "tk_many", "stock_many")
    tps: dict[str, list[float]] = {k: [] for k in conc_names}
    graph_cpu: dict[str, list[float]] = {k: [] for k in conc_names}
    service_ms: dict[str, list[float]] = {"tk_few": [], "lite_few": [], "tk_many": []}
    # PostgreSQL's CPU per turn, and the machine's busy cores, in the same runs.
    pg_ms: dict[str, list[float]] = {k: [] for k in conc_names}
    machine: dict[str, list[float]] = {k: [] for k in conc_names}
    spread: dict[str, list[float]] = {"tk": [], "stock": []}
    with ExitStack() as stack:
        new_database = stack.enter_context(postgres())
        data = stack.enter_context(scratch_dir("postgres"))
        (data / "pg").mkdir()
        (data / "sqlite").mkdir()
        tk_url, stock_url, counters_url = new_database(), new_database(), new_database()
        pg = stack.enter_context(Replica(data / "pg", tk_url))
        lite = stack.enter_context(Replica(data / "sqlite", None))
        host = stack.enter_context(alternate.async_host())
        side: dict[str, Turn] = {
            "tk": host.enter(side_turn("turnkeeper", pg.address)),
            "stock": host.enter(side_turn("stock", stock_url)),
            "lite": host.enter(side_turn("turnkeeper", lite.address)),
        }
        pids = {"tk": pg.pid, "lite": lite.pid}
        postmaster = _postmaster(counters_url)

        # Single turns, alternated.
        measured = alternate.alternate(
            {"tk": host.timed(side["tk"]), "stock": host.timed(side["stock"])},
            size.pg_blocks,
            size.pg_block,
        )
        single = {k: alternate.block_medians(v) for k, v in measured.items()}
        m["single_turnkeeper_s"] = alternate.overall(measured["tk"])
        m["single_stock_s"] = alternate.overall(measured["stock"])
        m["single_ratio"] = paired_ratio(single["tk"], single["stock"])

        # Concurrent rounds.
        for name in conc_names:
            host.call(_warm(side[name.split("_")[0]], many if name.endswith("many") else few))
        for round_ in range(size.pg_rounds):
            for name in conc_names if round_ % 2 == 0 else reversed(conc_names):
                which, level = name.split("_")
                many_level = level == "many"
                callers = many if many_level else few
                count = size.pg_turns_many if many_level else size.pg_turns
                pid = pids.get(which)
                service = cpu_seconds(pid) if pid is not None else {}
                graph, cluster, busy_s = (
                    time.process_time(),
                    _cluster_cpu(postmaster),
                    _machine_busy(),
                )
                elapsed = host.call(turns.async_callers(side[which], count, callers))
                pg_ms[name].append((_cluster_cpu(postmaster) - cluster) * 1e3 / count)
                machine[name].append((_machine_busy() - busy_s) / elapsed)
                graph_cpu[name].append((time.process_time() - graph) / elapsed)
                tps[name].append(count / elapsed)
                if pid is not None and name in service_ms:
                    used = sum(cpu_delta(service, cpu_seconds(pid)).values())
                    service_ms[name].append(used * 1e3 / count)
        t = {k: median(v) for k, v in tps.items()}
        busy = {k: median(v) for k, v in graph_cpu.items()}
        svc = {k: median(v) for k, v in service_ms.items()}
        m |= {f"tps_{k}": v for k, v in t.items()}
        m |= {f"graph_cores_{k}": v for k, v in busy.items()}
        m |= {f"service_cpu_ms_per_turn_{k}": v for k, v in svc.items()}
        m |= {f"postgres_cpu_ms_per_turn_{k}": median(v) for k, v in pg_ms.items()}
        m |= {f"machine_cores_{k}": median(v) for k, v in machine.items()}
        m["tps_ratio_few"] = paired_ratio(tps["tk_few"], tps["stock_few"])
        m["tps_ratio_many"] = paired_ratio(tps["tk_many"], tps["stock_many"])
        m["tps_ratio_many_vs_few"] = paired_ratio(tps["tk_many"], tps["tk_few"])
        m["service_cpu_ratio_pg_vs_sqlite"] = paired_ratio(
            service_ms["tk_few"], service_ms["lite_few"]
        )

        saturated = max(busy["tk_many"], busy["stock_many"]) >= SATURATED
        if saturated:
            # Each its own loop in a process of its own, alternated like the rounds.
            targets = {"tk": ("turnkeeper", pg.address), "stock": ("stock", stock_url)}
            for round_ in range(size.pg_spread_rounds):
                for which in ("tk", "stock") if round_ % 2 == 0 else ("stock", "tk"):
                    rate, _ = _spread(*targets[which], size.pg_turns_many, many)
                    spread[which].append(rate)
            m["tps_spread_tk_many"] = median(spread["tk"])
            m["tps_spread_stock_many"] = median(spread["stock"])
            m["tps_spread_ratio_many"] = paired_ratio(spread["tk"], spread["stock"])

        # Untimed: commits per turn on each side, one after the other and at `few`,
        # the two sides' passes run one after the other between two readings.
        n = size.pg_count_turns
        names = {"turnkeeper": _dbname(tk_url), "stock": _dbname(stock_url)}
        passes = {"turnkeeper": side["tk"], "stock": side["stock"]}
        readings: list[dict[str, int]] = []
        for callers in (0, 1, few):
            if callers:
                for turn in passes.values():
                    host.call(turns.async_callers(turn, n, callers))
            readings.append(
                _commits_reported(
                    counters_url,
                    list(names.values()),
                    size.pg_stats_wait,
                    readings[-1] if readings else None,
                )
            )
        for which, db in names.items():
            for level, (before, after) in (
                ("single", readings[0:2]),
                ("few", readings[1:3]),
            ):
                m[f"commits_per_turn_{which}_{level}"] = (after[db] - before[db]) / n

        # Untimed: the service's round trips to PostgreSQL (and, as the check that
        # sendto counts only those, the same turns through the SQLite service).
        trips: dict[str, dict[str, int] | str] = {}
        for name, which, callers in (
            ("single", "tk", 1),
            ("few", "tk", few),
            ("sqlite_single", "lite", 1),
            ("stock_single", "stock", 1),
            ("stock_few", "stock", few),
        ):
            # The stock saver's round trips leave this process (its pool is here).
            pid = pids.get(which, os.getpid())
            trips[name] = _socket_calls(pid, _runner(host, side[which], n, callers))
        for name, value in trips.items():
            if not isinstance(value, str):
                m |= {f"socket_{kind}_per_turn_{name}": v / n for kind, v in value.items()}

    def tps_row(label: str, mine: str, base: str, ratio_key: str, target: float) -> Row:
        got = m[ratio_key]
        return Row(
            label,
            fmt_rate(m[mine], " turns/s"),
            f"stock {fmt_rate(m[base], ' turns/s')}",
            fmt_ratio(got),
            f"≥ {target:.1f}\u00d7",
            got >= target,
        )

    section.rows = [
        Row(
            "per-turn time, single",
            fmt_ms(m["single_turnkeeper_s"]),
            f"stock {fmt_ms(m['single_stock_s'])}",
            fmt_ratio(m["single_ratio"]),
            "≤ 1.5\u00d7",
            m["single_ratio"] <= 1.5,
        ),
        tps_row(
            f"throughput, {few} concurrent turns",
            "tps_tk_few",
            "tps_stock_few",
            "tps_ratio_few",
            1.0,
        ),
        tps_row(
            f"throughput, {many} concurrent turns",
            "tps_tk_many",
            "tps_stock_many",
            "tps_ratio_many",
            3.0,
        ),
        Row(
            f"throughput, {many} concurrent against its own at {few} (no collapse)",
            fmt_rate(m["tps_tk_many"], " turns/s"),
            f"at {few} {fmt_rate(m['tps_tk_few'], ' turns/s')}",
            fmt_ratio(m["tps_ratio_many_vs_few"]),
            "≥ 0.8\u00d7",
            m["tps_ratio_many_vs_few"] >= 0.8,
        ),
    ]
    if saturated:
        section.rows.append(
            tps_row(
                f"throughput, {many} concurrent over {PROCESSES} graph processes",
                "tps_spread_tk_many",
                "tps_spread_stock_many",
                "tps_spread_ratio_many",
                3.0,
            )
        )
    section.rows += [
        Row(
            f"graph process CPU during the {many}-turn run (cores)",
            f"{m['graph_cores_tk_many']:.2f}",
            f"stock {m['graph_cores_stock_many']:.2f}",
        ),
        Row(
            f"service CPU per turn, {few} concurrent: PostgreSQL vs SQLite",
            f"{m['service_cpu_ms_per_turn_tk_few']:.2f} ms",
            f"SQLite {m['service_cpu_ms_per_turn_lite_few']:.2f} ms",
            fmt_ratio(m["service_cpu_ratio_pg_vs_sqlite"]),
            "≤ 1.0\u00d7",
            m["service_cpu_ratio_pg_vs_sqlite"] <= 1.0,
        ),
    ]
    for level, count in (("few", few), ("many", many)):
        ours_ms, stock_ms = (
            m[f"postgres_cpu_ms_per_turn_tk_{level}"],
            m[f"postgres_cpu_ms_per_turn_stock_{level}"],
        )
        section.rows.append(
            Row(
                f"PostgreSQL's CPU per turn, {count} concurrent",
                f"{ours_ms:.2f} ms",
                f"stock {stock_ms:.2f} ms",
                fmt_ratio(ratio(ours_ms, stock_ms)),
            )
        )
    section.rows.append(
        Row(
            f"the machine's busy cores during the {many}-turn run",
            f"{m['machine_cores_tk_many']:.2f}",
            f"stock {m['machine_cores_stock_many']:.2f}",
        )
    )
    for level, label in (("single", "one after the other"), ("few", f"{few} concurrent")):
        section.rows.append(
            Row(
                f"PostgreSQL commits per turn, {label}",
                f"{m[f'commits_per_turn_turnkeeper_{level}']:.2f}",
                f"stock {m[f'commits_per_turn_stock_{level}']:.2f}",
                fmt_ratio(
                    ratio(
                        m[f"commits_per_turn_turnkeeper_{level}"],
                        m[f"commits_per_turn_stock_{level}"],
                    )
                ),
            )
        )
    for name, label in (("single", "one after the other"), ("few", f"{few} concurrent")):
        mine, theirs = trips[name], trips[f"stock_{name}"]
        if isinstance(mine, str) or isinstance(theirs, str):
            section.rows.append(Row(f"round trips to PostgreSQL per turn, {label}", "not counted"))
            why = mine if isinstance(mine, str) else theirs
            section.notes.append(f"Round trips ({label}) were not counted: {why}.")
            continue
        section.rows += [
            Row(
                f"sends to PostgreSQL per turn (sendto), {label}: the service",
                f"{mine['postgres'] / n:.2f}",
                f"stock (graph process) {theirs['postgres'] / n:.2f}",
                fmt_ratio(ratio(mine["postgres"], theirs["postgres"])),
            ),
            Row(
                f"answers read from PostgreSQL per turn (recvfrom), {label}: the service",
                f"{mine['answers'] / n:.2f}",
                f"stock (graph process) {theirs['answers'] / n:.2f}",
                fmt_ratio(ratio(mine["answers"], theirs["answers"])),
            ),
        ]
    check = trips["sqlite_single"]
    if not isinstance(check, str):
        section.rows.append(
            Row(
                "the count's check: the service on SQLite, sendto per turn to PostgreSQL / "
                "over TCP / other",
                f"{check['postgres'] / n:.2f} / {check['tcp'] / n:.2f} / {check['other'] / n:.2f}",
            )
        )
        section.notes.append(
            "Sends are the `sendto` calls whose socket's peer is PostgreSQL's: libpq "
            "sends a message batch with one `send`, which is `sendto` on Linux. gRPC "
            "writes with `sendmsg` (the SQLite service makes no `sendto` over TCP); the "
            "other `sendto` calls are asyncio's wake-up socketpair (a loop woken from "
            "another thread), which the SQLite service makes too. Without pipeline mode "
            "a send is a round trip; in pipeline mode (the service's writer, decision "
            "265) statements are sent without waiting, so the round trips are the answers "
            "read: the `recvfrom` calls that got bytes from PostgreSQL (an upper bound: "
            "an answer read while sending, without waiting, counts too)."
        )
    cores = os.cpu_count() or 1
    section.notes += [
        f"Graph process CPU is in cores (1.00 = one core busy for the whole run); this "
        f"machine has {cores}. "
        + (
            f"A graph process reached {SATURATED:.0%} of a core at {many} in flight, so "
            f"the {many} turns also ran over {PROCESSES} processes per side."
            if saturated
            else f"No graph process reached {SATURATED:.0%} of a core at {many} in flight."
        )
        + f" The machine's cores were {m['machine_cores_tk_many']:.2f} busy (of {cores}) "
        f"during turnkeeper's {many}-turn runs, {m['machine_cores_stock_many']:.2f} during "
        "the stock saver's: the graph process, the service and PostgreSQL share them, so "
        "near the machine's count every side is CPU bound whatever its design.",
        "The installed AsyncPostgresSaver serialises every statement of one saver behind "
        "its instance lock, pool or not (LangGraph issue #7259), so its pool size does "
        "not change its figures here.",
    ]
    return section
