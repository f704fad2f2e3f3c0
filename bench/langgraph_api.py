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
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import (
    REPO_BENCH,
    Row,
    Section,
    ServerProcess,
    Size,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    free_port,
    median,
    nats_server,
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
def turnkeeper_api(data_dir: Path) -> Iterator[str]:
    """The service (SQLite, its HTTP port) and the graphs hosted by `turnkeeper agent`."""
    config = app_dir(data_dir) / "langgraph.json"
    port = free_port()
    with (
        nats_server() as nats_url,
        ServerProcess(data_dir, nats_url, args=["--http-port", str(port)]) as server,
    ):
        env = {
            **os.environ,
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
            yield url
        finally:
            stop_process(host)


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
def langgraph_dev(data_dir: Path) -> Iterator[str]:
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
        yield url
    finally:
        stop_process(proc)


# -- one streamed run, three ways ---------------------------------------------------------


def sdk_stream(url: str) -> Callable[[], Awaitable[None]]:
    from langgraph_sdk import get_client

    client = get_client(url=url)

    async def one() -> None:
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


def sdk_first_token(url: str) -> Callable[[], Awaitable[float]]:
    """Seconds from the model producing its first chunk to the client reading it."""
    from langgraph_sdk import get_client

    client = get_client(url=url)

    async def one() -> float:
        first: float | None = None
        async for part in client.runs.stream(
            None, TOKENS, input=QUESTION, stream_mode=["messages-tuple"]
        ):
            if first is None and part.event == "messages":
                first = (time.time_ns() - int(part.data[0]["content"])) / 1e9
        assert first is not None, "no token came"
        return first

    return one


def floor_first_token(db: Path) -> Callable[[], Awaitable[float]]:
    """The same in this process: `astream(stream_mode="messages")`, AsyncSqliteSaver."""
    import aiosqlite
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from bench.token_graph import graph

    state: dict[str, Any] = {}

    async def one() -> float:
        if "graph" not in state:
            conn = await aiosqlite.connect(str(db))
            saver = AsyncSqliteSaver(conn)
            await saver.setup()
            state["graph"] = graph.copy(update={"checkpointer": saver})
        n = state["n"] = state.get("n", 0) + 1
        config: Any = {"configurable": {"thread_id": f"token-{n}"}}
        first: float | None = None
        async for chunk, _ in state["graph"].astream(
            QUESTION, config, stream_mode="messages", durability="sync"
        ):
            if first is None:
                first = (time.time_ns() - int(chunk.content)) / 1e9
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


async def _concurrent(one: Callable[[], Awaitable[None]], n: int) -> float:
    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - started)


def run(size: Size) -> Section:
    single_n = max(3, size.saver_block)
    concurrent_n = 32
    rounds = max(1, size.saver_rounds)
    section = Section(
        key="langgraph",
        title="The LangGraph API: turnkeeper vs langgraph dev",
        method=(
            "The threadplane example (three nodes, each a streamed stand-in model call) "
            "served by turnkeeper (service on SQLite, `turnkeeper agent langgraph.json`) "
            "and by `langgraph dev` (in memory), through the same `langgraph_sdk` client: "
            "the time from `runs.stream` (a thread-less run, modes values and updates) to "
            f"its last part, {single_n} runs one after another, median; and runs/s with "
            f"{concurrent_n} at once. The floor: the same graph streamed in-process with "
            f'AsyncSqliteSaver (`durability="sync"`). {rounds} rounds, the three in turn; '
            "medians over the rounds."
        ),
    )
    figures: dict[str, list[float]] = {
        k: []
        for k in ("tk1", "dev1", "floor1", "tk32", "dev32", "floor32", "tkT", "devT", "floorT")
    }
    with scratch_dir("langgraph") as data_dir:
        (data_dir / "dev").mkdir()
        with turnkeeper_api(data_dir) as tk_url, langgraph_dev(data_dir / "dev") as dev_url:
            ways = {
                "tk": sdk_stream(tk_url),
                "dev": sdk_stream(dev_url),
                "floor": floor_stream(data_dir / "floor.db"),
            }
            first_tokens = {
                "tk": sdk_first_token(tk_url),
                "dev": sdk_first_token(dev_url),
                "floor": floor_first_token(data_dir / "token-floor.db"),
            }

            async def rounds_() -> None:
                for one in ways.values():  # warm each up
                    await one()
                for token in first_tokens.values():
                    await token()
                for _ in range(rounds):
                    for key, one in ways.items():
                        figures[f"{key}1"].append(median(await _single(one, single_n)))
                        figures[f"{key}32"].append(await _concurrent(one, concurrent_n))
                    for key, token in first_tokens.items():
                        figures[f"{key}T"].append(median([await token() for _ in range(single_n)]))

            asyncio.run(rounds_())
    m = {k: median(v) for k, v in figures.items()}
    section.metrics = {
        "turnkeeper_single_s": m["tk1"],
        "langgraph_dev_single_s": m["dev1"],
        "floor_single_s": m["floor1"],
        "turnkeeper_runs_per_s_32": m["tk32"],
        "langgraph_dev_runs_per_s_32": m["dev32"],
        "floor_runs_per_s_32": m["floor32"],
        "turnkeeper_first_token_s": m["tkT"],
        "langgraph_dev_first_token_s": m["devT"],
        "floor_first_token_s": m["floorT"],
    }
    token_vs_dev = m["tkT"] / m["devT"]
    token_vs_floor = m["tkT"] / m["floorT"]
    single_vs_dev = m["tk1"] / m["dev1"]
    through_vs_dev = m["tk32"] / m["dev32"]
    single_vs_floor = m["tk1"] / m["floor1"]
    through_vs_floor = m["floor32"] / m["tk32"]
    section.rows += [
        Row(
            "streamed run, one at a time",
            fmt_ms(m["tk1"]),
            f"langgraph dev {fmt_ms(m['dev1'])}",
            fmt_ratio(single_vs_dev),
            "≤ 0.05\u00d7",
            single_vs_dev <= 0.05,
        ),
        Row(
            "32 streamed runs at once",
            fmt_rate(m["tk32"], " runs/s"),
            f"langgraph dev {fmt_rate(m['dev32'], ' runs/s')}",
            fmt_ratio(through_vs_dev),
            "≥ 5\u00d7",
            through_vs_dev >= 5,
        ),
        Row(
            "streamed run vs the in-process floor",
            fmt_ms(m["tk1"]),
            f"AsyncSqliteSaver {fmt_ms(m['floor1'])}",
            fmt_ratio(single_vs_floor),
            "≤ 3\u00d7",
            single_vs_floor <= 3,
        ),
        Row(
            "32 at once vs the in-process floor (time per run)",
            fmt_rate(m["tk32"], " runs/s"),
            f"AsyncSqliteSaver {fmt_rate(m['floor32'], ' runs/s')}",
            fmt_ratio(through_vs_floor),
            "≤ 3\u00d7",
            through_vs_floor <= 3,
        ),
        Row(
            "first token, model to client (live stream)",
            fmt_ms(m["tkT"]),
            f"langgraph dev {fmt_ms(m['devT'])}",
            fmt_ratio(token_vs_dev),
            "≤ 20 ms",
            m["tkT"] <= 0.020,
        ),
        Row(
            "first token vs the in-process floor",
            fmt_ms(m["tkT"]),
            f"astream messages {fmt_ms(m['floorT'])}",
            fmt_ratio(token_vs_floor),
            "≤ 20 ms",
            m["tkT"] <= 0.020,
        ),
    ]
    section.notes.append(
        "`langgraph dev` keeps threads and runs in memory (a periodic flush to disk for "
        "development, not per step): nothing it has not flushed survives its process. "
        "turnkeeper makes every step durable (its checkpoint and events committed) "
        "before the run goes on, and streams a step once its checkpoint is durable; a "
        "model's tokens go out as they are journaled, ahead of the checkpoint, and a "
        "re-drive takes back any it undoes (decisions 290-292)."
    )
    section.notes.append(
        f"First token: {single_n} runs one after another per round, median; the chunk's "
        "arrival at the client less the time the model stamped in it (one machine, one "
        "clock). turnkeeper's path: the agent's callback journals it (one AppendEvents), "
        "the commit wakes the stream, the stream sends it."
    )
    return section
