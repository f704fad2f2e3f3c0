"""RemoteSaver against LangGraph's in-process SqliteSaver, on both of its transports:
the checkpoint stream per run (its default) and one unary call per operation.

Every saver commits with `synchronous=FULL` (the service's default; set with a
PRAGMA on SqliteSaver's and AsyncSqliteSaver's connections) in WAL mode.
AsyncSqliteSaver, the in-process saver an async agent would use, is measured
beside them; the targets are against SqliteSaver. The graph with no checkpointer is
the floor: what the turn costs with no durability at all; `transport_floor` adds
the stream's round trips to a process that does nothing but answer.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from turnkeeper.agent.saver import RemoteSaver

from bench import alternate, transport_floor, turns
from bench.common import (
    Row,
    Section,
    ServerProcess,
    Size,
    cpu_delta,
    cpu_seconds,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    median,
    paired_ratio,
    scratch_dir,
)


@contextmanager
def remote_turns(data_dir: Path) -> Iterator[tuple[dict[str, Callable[[], None]], int, str]]:
    """Turns through RemoteSaver on each transport, against one service; its pid, address."""
    with (
        ServerProcess(data_dir) as server,
        RemoteSaver.from_address(server.address, stream=True) as stream,
        RemoteSaver.from_address(server.address, stream=False) as unary,
    ):
        runs = {
            "stream": turns.graph_turn(turns.build(stream)),
            "unary": turns.graph_turn(turns.build(unary)),
        }
        yield runs, server.pid, server.address


def async_run(
    address: str, stream: bool, count: int, callers: int = 0, shared: bool = False
) -> float:
    """Async turns through a RemoteSaver made on an event loop of their own: seconds
    per turn one after the other, or with `callers`, turns/s; `shared`: every run on
    one checkpoint stream (`share_stream=True`)."""

    async def run() -> float:
        async with RemoteSaver(address, stream=stream, share_stream=shared) as saver:
            turn = turns.async_graph_turn(turns.build(saver))
            if callers:
                return await turns.async_concurrent(turn, count, callers)
            return await turns.async_single(turn, count)

    return asyncio.run(run())


@asynccontextmanager
async def async_sqlite_saver(path: Path) -> AsyncIterator[AsyncSqliteSaver]:
    """LangGraph's AsyncSqliteSaver (aiosqlite: SQLite in a thread of its own), with
    the same pragmas as `sqlite_turn`'s."""
    async with AsyncSqliteSaver.from_conn_string(str(path)) as saver:
        await saver.setup()
        await saver.conn.execute("PRAGMA journal_mode=WAL")
        await saver.conn.execute("PRAGMA synchronous=FULL")
        yield saver


@contextmanager
def sqlite_turn(data_dir: Path) -> Iterator[Callable[[], None]]:
    conn = sqlite3.connect(data_dir / "sqlite-saver.db", check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        # The service's level: every commit fsyncs the WAL.
        conn.execute("PRAGMA synchronous=FULL")
        saver = SqliteSaver(conn)
        saver.setup()
        yield turns.graph_turn(turns.build(saver))
    finally:
        conn.close()


def run(size: Size) -> Section:
    section = Section(
        key="saver",
        title="RemoteSaver vs in-process SqliteSaver",
        method=(
            f'A 4-node linear graph over ~2 KB of state, `durability="sync"`, a new thread '
            f"per turn. Single: {size.saver_blocks} blocks, each {size.saver_block} turns of "
            "every variant one after the other, the variants in an order reversed from "
            "block to block (the async ones timed on an event loop of their own thread); "
            "a figure is the median of all its turns, a ratio the median of the blocks' "
            "ratios (decision 163). "
            f"Concurrent: {size.saver_conc_rounds} rounds, each {size.saver_conc_turns} turns "
            f"of every variant on {size.saver_callers} threads, the variants in an order "
            "reversed from round to round, turns/s and CPU per turn; a figure is the median "
            "of the rounds, a ratio the median of the rounds' ratios (decision 165). "
            "RemoteSaver, against one service in its own process, on its "
            "checkpoint stream per run (`stream`) and with one unary call per operation "
            "(`unary`): with the blocking API (`invoke`, threads), and with the async API "
            "(`ainvoke`, as the bridge runs turns: the same counts as tasks on one event "
            "loop), there also with every run on one shared stream (`share_stream=True`, "
            "opt-in: decision 155). The "
            "blocking API's rows are measured beside the transport's floor without a "
            "target (they sit on grpc-python's per-message floor: bench/analysis.md, round "
            "thirteen; issue 38), the async stream's carry the targets (decision 143). "
            "SqliteSaver (blocking) shares one connection (its lock serialises every "
            "call). AsyncSqliteSaver (`ainvoke` on the async variants' event loop; "
            "aiosqlite runs SQLite in a thread of its own) is measured beside them as an "
            "async agent's in-process choice; the targets stay against SqliteSaver. All: "
            "WAL, synchronous=FULL."
        ),
    )
    names = ("floor", "sqlite", "stream", "unary", "astream", "aunary", "ashared", "asqlite")
    conc: dict[str, list[float]] = {k: [] for k in names}
    # CPU milliseconds per turn in the concurrent runs: this process (the graph and
    # its checkpointer's client side) and, for RemoteSaver, the service.
    client_ms: dict[str, list[float]] = {k: [] for k in names}
    service_ms: dict[str, list[float]] = {
        k: [] for k in ("stream", "unary", "astream", "aunary", "ashared")
    }
    # (stream, shared) of each async variant.
    asyncs = {"astream": (True, False), "aunary": (False, False), "ashared": (True, True)}
    with scratch_dir("saver") as data_dir:
        floor = turns.graph_turn(turns.build(None))
        with (
            sqlite_turn(data_dir) as sqlite_run,
            remote_turns(data_dir) as (remote, pid, address),
            transport_floor.answering_process() as answering,
        ):
            runs: dict[str, Callable[[], None]] = {"floor": floor, "sqlite": sqlite_run, **remote}
            with alternate.async_host() as host, ExitStack() as others:
                variants = {name: alternate.blocking(runs[name]) for name in names[:4]}
                # Each async variant's turn on its saver, open on the host's loop for
                # the single turns and the concurrent rounds alike.
                async_turns: dict[str, Callable[[], Awaitable[None]]] = {}
                for name, (stream, shared) in asyncs.items():
                    async_saver = host.enter(
                        RemoteSaver(address, stream=stream, share_stream=shared)
                    )
                    async_turns[name] = turns.async_graph_turn(turns.build(async_saver))
                    variants[name] = host.timed(async_turns[name])
                # The in-process saver an async agent would use instead.
                in_process = host.enter(async_sqlite_saver(data_dir / "async-sqlite-saver.db"))
                async_turns["asqlite"] = turns.async_graph_turn(turns.build(in_process))
                variants["asqlite"] = host.timed(async_turns["asqlite"])
                variants["transport"] = host.timed(
                    host.enter(transport_floor.floor_turn(answering))
                )
                variants["btransport"] = alternate.blocking(
                    others.enter_context(transport_floor.blocking_floor_turn(answering))
                )
                measured = alternate.alternate(variants, size.saver_blocks, size.saver_block)

                def one_concurrent(name: str) -> float:
                    count, callers = size.saver_conc_turns, size.saver_callers
                    if name in async_turns:
                        return host.call(turns.async_concurrent(async_turns[name], count, callers))
                    return turns.concurrent(runs[name], count, callers)

                # Short rounds, every variant in each, the order reversed from round
                # to round: each round's ratio compares runs seconds apart.
                for round_ in range(size.saver_conc_rounds):
                    order = list(names) if round_ % 2 == 0 else list(reversed(names))
                    for name in order:
                        client, service = time.process_time(), cpu_seconds(pid)
                        conc[name].append(one_concurrent(name))
                        per_turn = 1e3 / size.saver_conc_turns
                        client_ms[name].append((time.process_time() - client) * per_turn)
                        if name in service_ms:
                            used = cpu_delta(service, cpu_seconds(pid))
                            service_ms[name].append(sum(used.values()) * per_turn)
            single = {k: alternate.block_medians(v) for k, v in measured.items()}
            s = {k: alternate.overall(v) for k, v in measured.items()}
    c = {k: median(v) for k, v in conc.items()}
    cpu = {k: median(v) for k, v in client_ms.items()}
    svc = {k: median(v) for k, v in service_ms.items()}
    section.metrics = (
        {f"single_{k}_s": v for k, v in s.items()}
        | {f"concurrent_{k}_tps": v for k, v in c.items()}
        | {f"client_cpu_ms_per_turn_{k}": v for k, v in cpu.items()}
        | {f"service_cpu_ms_per_turn_{k}": v for k, v in svc.items()}
        | {"single_transport_floor_s": s["transport"]}
        | {"single_blocking_transport_floor_s": s["btransport"]}
    )
    single_ratio = paired_ratio(single["stream"], single["sqlite"])
    conc_ratio = paired_ratio(conc["stream"], conc["sqlite"])
    unary_single = paired_ratio(single["unary"], single["sqlite"])
    unary_conc = paired_ratio(conc["unary"], conc["sqlite"])
    service_ratio = paired_ratio(service_ms["stream"], service_ms["unary"])
    a_service_ratio = paired_ratio(service_ms["astream"], service_ms["aunary"])
    a_single = paired_ratio(single["astream"], single["sqlite"])
    a_conc = paired_ratio(conc["astream"], conc["sqlite"])
    shared_conc = paired_ratio(conc["ashared"], conc["sqlite"])
    shared_service = paired_ratio(service_ms["ashared"], service_ms["astream"])
    shared_client = paired_ratio(client_ms["ashared"], client_ms["astream"])
    shared_vs_unary = paired_ratio(service_ms["ashared"], service_ms["aunary"])
    section.metrics |= {
        "concurrent_ratio_async_shared": shared_conc,
        "service_cpu_ratio_shared_vs_stream_async": shared_service,
        "client_cpu_ratio_shared_vs_stream_async": shared_client,
        "service_cpu_ratio_shared_vs_unary_async": shared_vs_unary,
        "single_ratio": single_ratio,
        "concurrent_ratio": conc_ratio,
        "single_ratio_unary": unary_single,
        "concurrent_ratio_unary": unary_conc,
        "service_cpu_ratio_stream_vs_unary": service_ratio,
        "service_cpu_ratio_stream_vs_unary_async": a_service_ratio,
        "single_ratio_async_stream": a_single,
        "concurrent_ratio_async_stream": a_conc,
        "single_ratio_async_stream_vs_async_sqlite": paired_ratio(
            single["astream"], single["asqlite"]
        ),
        "concurrent_ratio_async_stream_vs_async_sqlite": paired_ratio(
            conc["astream"], conc["asqlite"]
        ),
    }
    baselines = {
        "sqlite": "SqliteSaver",
        "asqlite": "AsyncSqliteSaver",
        "transport": "floor",
        "btransport": "floor",
    }

    def single_row(label: str, name: str, base: str = "sqlite") -> Row:
        """A single-turn figure against its baseline's, block by block."""
        return Row(
            label,
            fmt_ms(s[name]),
            f"{baselines[base]} {fmt_ms(s[base])}",
            fmt_ratio(paired_ratio(single[name], single[base])),
        )

    section.rows = [
        Row(
            "per-turn time, single: blocking, unary (its default)",
            fmt_ms(s["unary"]),
            f"SqliteSaver {fmt_ms(s['sqlite'])}",
            fmt_ratio(unary_single),
        ),
        single_row("per-turn time, single: blocking, stream", "stream"),
        Row(
            f"throughput, {size.saver_callers} concurrent turns: blocking, unary (its default)",
            fmt_rate(c["unary"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(unary_conc),
        ),
        Row(
            f"throughput, {size.saver_callers} concurrent turns: blocking, stream",
            fmt_rate(c["stream"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(conc_ratio),
        ),
        Row(
            "per-turn time, single: async stream (its default)",
            fmt_ms(s["astream"]),
            f"SqliteSaver {fmt_ms(s['sqlite'])}",
            fmt_ratio(a_single),
            "≤ 1.5\u00d7",
            a_single <= 1.5,
        ),
        single_row("per-turn time, single: async unary", "aunary"),
        single_row(
            "per-turn time, single: AsyncSqliteSaver (`ainvoke`, in-process), for comparison",
            "asqlite",
        ),
        single_row(
            "per-turn time, single: async stream against AsyncSqliteSaver", "astream", "asqlite"
        ),
        Row(
            f"throughput, {size.saver_callers} concurrent turns: async stream (its default)",
            fmt_rate(c["astream"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(a_conc),
            "≥ 1\u00d7",
            a_conc >= 1.0,
        ),
        Row(
            f"throughput, {size.saver_callers} concurrent turns: async, one shared stream",
            fmt_rate(c["ashared"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(shared_conc),
        ),
        Row(
            f"throughput, {size.saver_callers} concurrent turns: async unary",
            fmt_rate(c["aunary"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(paired_ratio(conc["aunary"], conc["sqlite"])),
        ),
        Row(
            f"throughput, {size.saver_callers} concurrent turns: AsyncSqliteSaver (in-process)",
            fmt_rate(c["asqlite"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(paired_ratio(conc["asqlite"], conc["sqlite"])),
        ),
        Row(
            f"throughput, {size.saver_callers} concurrent turns: async stream against "
            "AsyncSqliteSaver",
            fmt_rate(c["astream"], " turns/s"),
            f"AsyncSqliteSaver {fmt_rate(c['asqlite'], ' turns/s')}",
            fmt_ratio(paired_ratio(conc["astream"], conc["asqlite"])),
        ),
        single_row("floor: no checkpointer, single", "floor"),
        single_row(
            "floor: InMemorySaver and the stream's 7 round trips to a process that only "
            "answers, single",
            "transport",
        ),
        single_row("per-turn time, single: async stream over that floor", "astream", "transport"),
        single_row(
            "floor, blocking: InMemorySaver through `invoke` and 7 unary round trips, one "
            "after the other, to a process that only answers, single",
            "btransport",
        ),
        single_row("per-turn time, single: blocking unary over that floor", "unary", "btransport"),
        Row(
            f"floor: no checkpointer, {size.saver_callers} concurrent",
            fmt_rate(c["floor"], " turns/s"),
            f"SqliteSaver {fmt_rate(c['sqlite'], ' turns/s')}",
            fmt_ratio(paired_ratio(conc["floor"], conc["sqlite"])),
        ),
        Row(
            "CPU per turn, concurrent: graph process, stream",
            f"{cpu['stream']:.1f} ms",
            f"SqliteSaver {cpu['sqlite']:.1f} ms (no checkpointer {cpu['floor']:.1f} ms)",
            fmt_ratio(paired_ratio(client_ms["stream"], client_ms["sqlite"])),
        ),
        Row(
            "CPU per turn, concurrent: graph process, unary",
            f"{cpu['unary']:.1f} ms",
            f"SqliteSaver {cpu['sqlite']:.1f} ms",
            fmt_ratio(paired_ratio(client_ms["unary"], client_ms["sqlite"])),
        ),
        Row(
            "CPU per turn, concurrent: the service, stream vs unary",
            f"{svc['stream']:.1f} ms",
            f"unary {svc['unary']:.1f} ms",
            fmt_ratio(service_ratio),
            "≤ 0.5\u00d7",
            service_ratio <= 0.5,
        ),
        Row(
            "CPU per turn, concurrent: the service, async stream vs async unary",
            f"{svc['astream']:.1f} ms",
            f"async unary {svc['aunary']:.1f} ms",
            fmt_ratio(a_service_ratio),
            "≤ 0.5\u00d7",
            a_service_ratio <= 0.5,
        ),
        Row(
            "CPU per turn, concurrent: the service, async shared stream vs async unary",
            f"{svc['ashared']:.1f} ms",
            f"async unary {svc['aunary']:.1f} ms",
            fmt_ratio(shared_vs_unary),
            "≤ 0.5\u00d7",
            shared_vs_unary <= 0.5,
        ),
        Row(
            "CPU per turn, concurrent: the service, async shared stream vs a stream per run",
            f"{svc['ashared']:.1f} ms",
            f"a stream per run {svc['astream']:.1f} ms",
            fmt_ratio(shared_service),
        ),
        Row(
            "CPU per turn, concurrent: graph process, async shared stream vs a stream per run",
            f"{cpu['ashared']:.1f} ms",
            f"a stream per run {cpu['astream']:.1f} ms",
            fmt_ratio(shared_client),
        ),
    ]
    cores = os.cpu_count() or 1
    per_turn_cpu = cpu["stream"] + svc["stream"]
    section.notes.append(
        f"CPU bound on this machine's {cores} cores: a RemoteSaver turn on its stream costs "
        f"{per_turn_cpu:.1f} ms of CPU (graph process + service), so "
        f"{cores} cores cap it near {1e3 * cores / per_turn_cpu:,.0f} "
        f"turns/s; an in-process SqliteSaver turn costs {cpu['sqlite']:.1f} ms in one "
        "GIL-bound process."
    )
    return section
