"""The LangGraph API: turnkeeper against `langgraph dev`, through the same SDK client.

The same graph (examples/threadplane, three nodes, each a streamed stand-in model
call) served by turnkeeper (the service plus `turnkeeper agent langgraph.json`) and
by `langgraph dev` (langgraph-cli's in-memory server: nothing survives its process),
driven by one `langgraph_sdk` client; beside them the floor, the same graph streamed
in-process with `AsyncSqliteSaver`. Measured: the time from `runs.stream` to its
last part, one run at a time, and throughput with 32 runs at once. And the first
token: a one-node graph (bench/token_graph.py) whose model stamps its first chunk
with the time it produced it, streamed in mode `messages-tuple`; the figure is that
chunk's arrival at the client less its stamp.

`langgraph dev` runs from its own virtualenv (bench/langgraph-dev.txt, decision 217):
`TURNKEEPER_BENCH_LANGGRAPH` names its `langgraph` executable, else one is made under
`~/.cache/turnkeeper-bench/`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from turnkeeper_server.messaging.embedded import EmbeddedNats

from bench import aegra
from bench.common import (
    REPO_BENCH,
    Row,
    Section,
    ServerProcess,
    Size,
    cpu_seconds,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    free_port,
    median,
    paired_ratio,
    scratch_dir,
    stop_process,
)

EXAMPLE = REPO_BENCH.parent / "examples" / "threadplane"
CONFIG = EXAMPLE / "langgraph.json"
ASSISTANT = "durable-execution"
TOKENS = "first-token"
MODES: Any = ["values", "updates"]
QUESTION: dict[str, Any] = {"messages": [{"role": "user", "content": "how fast?"}]}
CACHE = Path.home() / ".cache" / "turnkeeper-bench" / "langgraph-dev"


def langgraph_executable() -> Path:
    given = os.environ.get("TURNKEEPER_BENCH_LANGGRAPH")
    if given:
        return Path(given)
    exe = CACHE / "bin" / "langgraph"
    if not exe.exists():
        venv.create(CACHE, with_pip=True)
        subprocess.run(
            [
                str(CACHE / "bin" / "pip"),
                "install",
                "-q",
                "-r",
                str(REPO_BENCH / "langgraph-dev.txt"),
            ],
            check=True,
        )
    return exe


def _spawn(
    args: list[str], env: dict[str, str], log_path: Path, cwd: Path | None = None
) -> subprocess.Popen[Any]:
    """A child whose output goes to `log_path`."""
    with log_path.open("w") as log:
        return subprocess.Popen(args, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)


def _wait_ok(url: str, proc: subprocess.Popen[Any], timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer /ok in {timeout:g} s")


def app_dir(data_dir: Path) -> Path:
    """A copy of the example with the first-token graph beside it: both servers serve
    it from here (`langgraph dev` writes its in-memory state's flushes,
    `.langgraph_api/`, beside the config, not into the repository)."""
    app = data_dir / "app"
    if not app.exists():
        app.mkdir()
        shutil.copy(EXAMPLE / "graph.py", app / "graph.py")
        shutil.copy(REPO_BENCH / "token_graph.py", app / "token_graph.py")
        graphs = {ASSISTANT: "./graph.py:graph", TOKENS: "./token_graph.py:graph"}
        (app / "langgraph.json").write_text(
            json.dumps({"dependencies": ["."], "graphs": graphs, "env": {}})
        )
    return app


@contextmanager
def turnkeeper_api(
    data_dir: Path,
    database_url: str | None = None,
    *,
    service_env: dict[str, str] | None = None,
    agent_env: dict[str, str] | None = None,
) -> Iterator[tuple[str, list[int]]]:
    """The service (SQLite, or PostgreSQL at `database_url`; its HTTP port) and the
    graphs hosted by `turnkeeper agent`; yields the URL and the pids of its processes
    (service, agent host, NATS). `service_env` and `agent_env` are added to each
    process's environment (bench/run_timeline.py: its probe, another checkout's code)."""
    config = app_dir(data_dir) / "langgraph.json"
    port = free_port()
    nats = EmbeddedNats()
    nats_url = nats.start()
    database = {"TURNKEEPER_DATABASE_URL": database_url} if database_url else {}
    try:
        with ServerProcess(
            data_dir,
            nats_url,
            env={**database, **(service_env or {})},
            args=["--http-port", str(port)],
        ) as server:
            env = {
                **os.environ,
                **(agent_env or {}),
                "TURNKEEPER_ADDRESS": server.address,
                "NATS_URL": nats_url,
                "TURNKEEPER_REPLICA": "bench",
                "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
            }
            host = _spawn(
                [sys.executable, "-m", "turnkeeper.agent.host", str(config)],
                env,
                data_dir / "host.log",
            )
            url = f"http://127.0.0.1:{port}"
            try:
                _wait_announced(url, host)
                assert nats.process is not None
                yield url, [server.pid, host.pid, nats.process.pid]
            finally:
                stop_process(host)
    finally:
        nats.stop()


def _wait_announced(url: str, proc: subprocess.Popen[Any], timeout: float = 60) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("turnkeeper agent exited")
        found = httpx.post(f"{url}/assistants/search", json={}, timeout=2).json()
        if {ASSISTANT, TOKENS} <= {a["graph_id"] for a in found}:
            return
        time.sleep(0.2)
    raise RuntimeError("the hosted graph was not announced")


@contextmanager
def langgraph_dev(data_dir: Path) -> Iterator[tuple[str, list[int]]]:
    """`langgraph dev` on the copy of the example (`app_dir`)."""
    app = app_dir(data_dir)
    port = free_port()
    env = {
        **os.environ,
        "LANGGRAPH_CLI_NO_ANALYTICS": "1",
        "LANGSMITH_TRACING": "false",
    }
    proc = _spawn(
        [
            str(langgraph_executable()),
            "dev",
            "--config",
            str(app / "langgraph.json"),
            "--port",
            str(port),
            "--no-browser",
            "--no-reload",
        ],
        env,
        data_dir / "langgraph-dev.log",
        cwd=app,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ok(url, proc)
        yield url, [proc.pid]
    finally:
        stop_process(proc)


# -- one streamed run, three ways ---------------------------------------------------------


# The SDK's client holds at most 100 connections (httpx's default) and fails a
# request that waited 5 s for one: the runs at once go over this many clients, each
# willing to wait, so that 200 at once are 200 streams, none failed by the client.
CLIENTS = 2


def sdk_stream(url: str) -> Callable[[], Awaitable[None]]:
    import itertools

    from langgraph_sdk import get_client

    timeout = (5.0, 300.0, 300.0, 300.0)  # connect, read, write, pool
    clients = itertools.cycle([get_client(url=url, timeout=timeout) for _ in range(CLIENTS)])

    async def one() -> None:
        client = next(clients)
        async for _ in client.runs.stream(None, ASSISTANT, input=QUESTION, stream_mode=MODES):
            continue  # the figure is the time to the last part

    return one


def floor_stream(db: Path) -> Callable[[], Awaitable[None]]:
    """The graph in this process with AsyncSqliteSaver: no service, no network."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from turnkeeper.agent.host import load_graph, read_config

    state: dict[str, Any] = {}

    async def one() -> None:
        if "graph" not in state:
            # The host's own loader: the graph exactly as `turnkeeper agent` loads it.
            graph = await load_graph(read_config(CONFIG).graphs[0])
            conn = await aiosqlite.connect(str(db))
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            state["graph"] = graph.copy(update={"checkpointer": saver})  # type: ignore[union-attr]
        n = state["n"] = state.get("n", 0) + 1
        config: Any = {"configurable": {"thread_id": f"floor-{n}", "run_id": f"run-{n}"}}
        async for _ in state["graph"].astream(
            QUESTION, config, stream_mode=MODES, durability="sync"
        ):
            continue  # the figure is the time to the last part

    return one


def sdk_first_token(url: str) -> Callable[[], Awaitable[tuple[float, float]]]:
    """Seconds from `runs.stream` to the first token, and from the model producing
    that chunk to the client reading it."""
    from langgraph_sdk import get_client

    client = get_client(url=url)

    async def one() -> tuple[float, float]:
        first: tuple[float, float] | None = None
        started = time.perf_counter()
        async for part in client.runs.stream(
            None, TOKENS, input=QUESTION, stream_mode=["messages-tuple"]
        ):
            if first is None and part.event == "messages":
                first = (
                    time.perf_counter() - started,
                    (time.time_ns() - int(part.data[0]["content"])) / 1e9,
                )
        assert first is not None, "no token came"
        return first

    return one


def floor_first_token(db: Path) -> Callable[[], Awaitable[tuple[float, float]]]:
    """The same in this process: `astream(stream_mode="messages")`, AsyncSqliteSaver."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from bench.token_graph import graph

    state: dict[str, Any] = {}

    async def one() -> tuple[float, float]:
        if "graph" not in state:
            conn = await aiosqlite.connect(str(db))
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            state["graph"] = graph.copy(update={"checkpointer": saver})
        n = state["n"] = state.get("n", 0) + 1
        config: Any = {"configurable": {"thread_id": f"token-{n}"}}
        first: tuple[float, float] | None = None
        started = time.perf_counter()
        async for chunk, _ in state["graph"].astream(
            QUESTION, config, stream_mode="messages", durability="sync"
        ):
            if first is None:
                first = (
                    time.perf_counter() - started,
                    (time.time_ns() - int(chunk.content)) / 1e9,
                )
        assert first is not None, "no token came"
        return first

    return one


async def _single(one: Callable[[], Awaitable[None]], n: int) -> list[float]:
    times = []
    for _ in range(n):
        started = time.perf_counter()
        await one()
        times.append(time.perf_counter() - started)
    return times


async def _concurrent(one: Callable[[], Awaitable[None]], n: int) -> tuple[float, int]:
    """Runs/s with `n` at once (runs that finished), and how many failed."""
    started = time.perf_counter()
    done = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    failed = sum(isinstance(d, BaseException) for d in done)
    return (n - failed) / (time.perf_counter() - started), failed


# The ways a run is served, in the order of a round (reversed every other round):
# Aegra on PostgreSQL, turnkeeper on SQLite and on PostgreSQL, `langgraph dev`, and the
# in-process floor.
WAYS = ("aegra", "tk", "pg", "dev", "floor")
# The one-at-a-time runs of a round, in first-token samples: the CPU they are read over
# is /proc's, in whole 10 ms ticks per process, and PostgreSQL's is the cluster's (a
# checkpoint or an autovacuum lands in whichever way's window it falls): over ten runs
# a round the PostgreSQL/SQLite row read 1.21-2.00x across five runs of the same code
# (bench/analysis.md, round twenty-five). `langgraph dev`, whose run takes a second
# (its queue's poll) and whose CPU no row reads, runs the first-token count.
ONE_AT_A_TIME = 4
FIGURES = ("single", "cpu1", "db1", "r32", "cpu32", "db32", "r200", "fail200", "ttft", "tok")


class _Way:
    """One server (or the floor): its run, its first token, and the CPU seconds of its
    processes so far (service side, database side)."""

    def __init__(
        self,
        one: Callable[[], Awaitable[None]],
        token: Callable[[], Awaitable[tuple[float, float]]],
        cpu: Callable[[], tuple[float, float]],
        one_at_a_time: int = ONE_AT_A_TIME,
    ) -> None:
        self.one, self.token, self.cpu = one, token, cpu
        self.one_at_a_time = one_at_a_time


async def _measure(
    way: _Way, figures: dict[str, list[float]], single_n: int, few: int, many: int
) -> None:
    s0, d0 = way.cpu()
    times = await _single(way.one, way.one_at_a_time * single_n)
    s1, d1 = way.cpu()
    figures["single"].append(median(times))
    figures["cpu1"].append((s1 - s0 + d1 - d0) / len(times))
    figures["db1"].append((d1 - d0) / len(times))
    rate, failed = await _concurrent(way.one, few)
    s2, d2 = way.cpu()
    figures["r32"].append(rate)
    figures["cpu32"].append((s2 - s1 + d2 - d1) / max(1, few - failed))
    figures["db32"].append((d2 - d1) / max(1, few - failed))
    rate, failed = await _concurrent(way.one, many)
    figures["r200"].append(rate)
    figures["fail200"].append(failed)
    tokens = [await way.token() for _ in range(single_n)]
    figures["ttft"].append(median([t[0] for t in tokens]))
    figures["tok"].append(median([t[1] for t in tokens]))


def run(size: Size) -> Section:
    from bench.postgres import postgres
    from bench.postgres_section import _postmaster

    single_n = max(3, size.saver_block)
    few, many = (32, 200) if size.name == "full" else (4, 8)
    rounds = max(1, size.saver_rounds)
    section = Section(
        key="langgraph",
        title="The LangGraph API: turnkeeper vs Aegra and langgraph dev",
        method=(
            "The threadplane example (three nodes, each a streamed stand-in model call) "
            "served by turnkeeper (the service on SQLite, and another on PostgreSQL, each "
            "with `turnkeeper agent langgraph.json`), by Aegra (`aegra-api`, "
            "bench/aegra.txt, from its own Python 3.12 virtualenv: one uvicorn process, no "
            "Redis) on the same PostgreSQL cluster (pgserver's PostgreSQL 16, a database "
            "each), and by `langgraph dev` (in memory), through the same `langgraph_sdk` "
            "client: the time from `runs.stream` (a thread-less run, modes values and "
            f"updates) to its last part, {ONE_AT_A_TIME * single_n} runs one after another "
            f"({single_n} for `langgraph dev`), median; runs/s "
            f"with {few} and with {many} at once (runs that finished over the wall time; "
            f"the runs go over {CLIENTS} SDK clients, each holding up to 100 connections, "
            "so every run at once is a stream of its own). "
            "Time to first token: from `runs.stream` to the first `messages` part of a "
            "one-node graph (bench/token_graph.py). CPU per run: every process of a "
            "server (its process tree from /proc: the service, the agent host and NATS "
            "for turnkeeper), plus PostgreSQL's postmaster and backends for the servers "
            "on it, over the one-at-a-time runs and over the runs at once; the client's "
            "own CPU is not counted. The floor: the same graph streamed in-process with "
            f'AsyncSqliteSaver (`durability="sync"`; its CPU is this process\'s). {rounds} '
            "rounds, every way in turn, the order reversed from round to round; a figure "
            "is the median over the rounds, a ratio the median of the rounds' ratios."
        ),
    )
    figures: dict[str, dict[str, list[float]]] = {w: {f: [] for f in FIGURES} for w in WAYS}
    absent: str | None = None
    with ExitStack() as stack:
        data_dir = stack.enter_context(scratch_dir("langgraph"))
        for w in WAYS:
            (data_dir / w).mkdir()
        new_database = stack.enter_context(postgres())
        pg_database = new_database()
        postmaster = _postmaster(pg_database)

        def db_cpu() -> float:
            return aegra.tree_cpu([postmaster])

        def server_cpu(pids: list[int], db: bool) -> Callable[[], tuple[float, float]]:
            return lambda: (aegra.tree_cpu(pids), db_cpu() if db else 0.0)

        tk_url, tk_pids = stack.enter_context(turnkeeper_api(data_dir / "tk"))
        pg_url, pg_pids = stack.enter_context(turnkeeper_api(data_dir / "pg", pg_database))
        dev_url, dev_pids = stack.enter_context(langgraph_dev(data_dir / "dev"))
        ways: dict[str, _Way] = {}
        try:
            python = aegra.aegra_python()
            aegra_url, aegra_pid = stack.enter_context(
                aegra.aegra_server(app_dir(data_dir / "aegra"), new_database(), python)
            )
            ways["aegra"] = _Way(
                sdk_stream(aegra_url), sdk_first_token(aegra_url), server_cpu([aegra_pid], True)
            )
        except aegra.Unavailable as exc:
            absent = str(exc)
            print(f"bench: langgraph: without Aegra: {absent}", file=sys.stderr)
        ways["tk"] = _Way(sdk_stream(tk_url), sdk_first_token(tk_url), server_cpu(tk_pids, False))
        ways["pg"] = _Way(sdk_stream(pg_url), sdk_first_token(pg_url), server_cpu(pg_pids, True))
        ways["dev"] = _Way(
            sdk_stream(dev_url),
            sdk_first_token(dev_url),
            server_cpu(dev_pids, False),
            one_at_a_time=1,
        )
        ways["floor"] = _Way(
            floor_stream(data_dir / "floor.db"),
            floor_first_token(data_dir / "token-floor.db"),
            lambda: (sum(cpu_seconds(os.getpid()).values()), 0.0),
        )

        async def rounds_() -> None:
            for way in ways.values():  # warm each up
                await way.one()
                await way.token()
            order = list(ways)
            for r in range(rounds):
                for key in order if r % 2 == 0 else reversed(order):
                    await _measure(ways[key], figures[key], single_n, few, many)

        asyncio.run(rounds_())
    measured = [w for w in WAYS if figures[w]["single"]]
    m = {(w, f): median(figures[w][f]) for w in measured for f in FIGURES}
    section.metrics = {
        f"{w}_{f}": m[w, f] for w in measured for f in FIGURES if w != "floor" or "db" not in f
    }
    section.rows += _rows(m, figures, has_aegra=absent is None, few=few, many=many)
    if absent is not None:
        section.notes.append(f"Aegra is not in this run: {absent}.")
    section.notes += _notes(single_n)
    return section


def _ratio(figures: dict[str, dict[str, list[float]]], a: str, b: str, f: str) -> float:
    return paired_ratio(figures[a][f], figures[b][f])


def _rows(
    m: dict[tuple[str, str], float],
    figures: dict[str, dict[str, list[float]]],
    *,
    has_aegra: bool,
    few: int,
    many: int,
) -> list[Row]:
    def also(f: str, fmt: Callable[[float], str], ways: tuple[str, ...]) -> str:
        names = {"aegra": "Aegra", "tk": "SQLite", "dev": "langgraph dev", "floor": "floor"}
        return " · ".join(f"{names[w]} {fmt(m[w, f])}" for w in ways if (w, f) in m)

    def rate(v: float) -> str:
        return fmt_rate(v, " runs/s")

    def cpu(w: str, f: str, db: str) -> str:
        if w in ("pg", "aegra"):
            return f"{fmt_ms(m[w, f])} ({fmt_ms(m[w, f] - m[w, db])} + {fmt_ms(m[w, db])} db)"
        return fmt_ms(m[w, f])

    rows = [
        # Against langgraph dev and the floor, as before (turnkeeper on SQLite).
        Row(
            f"{few} streamed runs at once vs langgraph dev",
            rate(m["tk", "r32"]),
            f"langgraph dev {rate(m['dev', 'r32'])}",
            fmt_ratio(_ratio(figures, "tk", "dev", "r32")),
            "≥ 5\u00d7",
            _ratio(figures, "tk", "dev", "r32") >= 5,
        ),
        Row(
            "streamed run vs the in-process floor",
            fmt_ms(m["tk", "single"]),
            f"AsyncSqliteSaver {fmt_ms(m['floor', 'single'])}",
            fmt_ratio(_ratio(figures, "tk", "floor", "single")),
            "≤ 2\u00d7",
            _ratio(figures, "tk", "floor", "single") <= 2,
        ),
        Row(
            "first token, model to client (live stream)",
            fmt_ms(m["tk", "tok"]),
            also("tok", fmt_ms, ("aegra", "dev", "floor")),
            fmt_ratio(_ratio(figures, "tk", "dev", "tok")) + " of dev",
            "≤ 20 ms",
            m["tk", "tok"] <= 0.020,
        ),
    ]
    if not has_aegra:
        return rows
    for w, label, single_t, rate_t in (("tk", "SQLite", 1.0, 3.0), ("pg", "PostgreSQL", 1.2, 2.0)):
        single = _ratio(figures, w, "aegra", "single")
        ttft = _ratio(figures, w, "aegra", "ttft")
        r32 = _ratio(figures, w, "aegra", "r32")
        r200 = _ratio(figures, w, "aegra", "r200")
        refused = max(figures[w]["fail200"])
        rows += [
            Row(
                f"{label}: streamed run, one at a time, vs Aegra",
                fmt_ms(m[w, "single"]),
                also("single", fmt_ms, ("aegra", "dev", "floor")),
                fmt_ratio(single),
                f"≤ {single_t:g}\u00d7",
                single <= single_t,
            ),
            Row(
                f"{label}: time to first token vs Aegra",
                fmt_ms(m[w, "ttft"]),
                also("ttft", fmt_ms, ("aegra", "dev", "floor")),
                fmt_ratio(ttft),
                "≤ 1\u00d7",
                ttft <= 1,
            ),
            Row(
                f"{label}: {few} streamed runs at once vs Aegra",
                rate(m[w, "r32"]),
                also("r32", rate, ("aegra", "dev", "floor")),
                fmt_ratio(r32),
                f"≥ {rate_t:g}\u00d7",
                r32 >= rate_t,
            ),
            Row(
                f"{label}: {many} streamed runs at once vs Aegra",
                rate(m[w, "r200"]) + (f" ({refused:.0f} failed)" if refused else ""),
                also("r200", rate, ("aegra", "dev", "floor")),
                fmt_ratio(r200),
                f"≥ {rate_t:g}\u00d7, none failed",
                r200 >= rate_t and not refused,
            ),
        ]
    for f, db, what in (("cpu1", "db1", "one at a time"), (("cpu32", "db32", f"{few} at once"))):
        vs_lite = _ratio(figures, "pg", "tk", f)
        rows.append(
            Row(
                f"CPU per run, {what}, PostgreSQL vs SQLite (all processes)",
                cpu("pg", f, db),
                f"SQLite {cpu('tk', f, db)} · Aegra {cpu('aegra', f, db)}",
                fmt_ratio(vs_lite) + f" ({fmt_ratio(_ratio(figures, 'pg', 'aegra', f))} of Aegra)",
                "≤ 1.5\u00d7",
                vs_lite <= 1.5,
            )
        )
    return rows


def _notes(single_n: int) -> list[str]:
    return [
        "`langgraph dev` keeps threads and runs in memory (a periodic flush to disk for "
        "development, not per step): nothing it has not flushed survives its process. "
        "turnkeeper makes every step durable (its checkpoint and events committed) "
        "before the run goes on, and streams a step once its checkpoint is durable; a "
        "model's tokens go out as they are journaled, ahead of the checkpoint, and a "
        "re-drive takes back any it undoes (decisions 290-292).",
        "Aegra without Redis runs every run as a task on its one event loop (one core at "
        "most) and checkpoints through LangGraph's AsyncPostgresSaver; a run it was "
        "serving when its process died stays `running` (no crash recovery without Redis, "
        "as its log says at start). turnkeeper re-drives it.",
        f"First token: {single_n} runs one after another per round, median. Time to "
        "first token counts from `runs.stream`; model to client is the chunk's arrival "
        "at the client less the time the model stamped in it (one machine, one clock). "
        "turnkeeper's path: the agent's callback journals it (one AppendEvents), the "
        "commit wakes the stream, the stream sends it.",
    ]
