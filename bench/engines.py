"""A 4-step durable turn through RemoteSaver against the same four steps as a DBOS
workflow on SQLite and as a Restate service; the graph with no checkpointer is the
floor. Single turns of turnkeeper, Restate and the floor alternate block by block
(bench/alternate.py); DBOS, a runtime of its own process, runs after them in the
same round.

Durability of each: turnkeeper commits every checkpoint with synchronous=FULL (an
fsync of the WAL); DBOS's SQLite system database keeps SQLite's defaults (rollback
journal, synchronous=FULL); Restate appends every journal entry to its log with
RocksDB's WAL fsync on (its default).

DBOS and Restate are bench-only dependencies (`pip install -e '.[bench]'`, and
`npm ci --prefix bench` for the Restate server); without them their rows say why
they were not measured.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from turnkeeper.agent.saver import RemoteSaver

from bench import alternate, saver, turns
from bench.common import (
    REPO_BENCH,
    Row,
    Section,
    Size,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    free_port,
    median,
    paired_ratio,
    scratch_dir,
    stop_process,
)

RESTATE_BIN = REPO_BENCH / "node_modules" / ".bin" / "restate-server"
RESTATE_PACKAGE = REPO_BENCH / "node_modules" / "@restatedev" / "restate-server" / "package.json"


def extra_versions() -> dict[str, str]:
    try:
        version = json.loads(RESTATE_PACKAGE.read_text())["version"]
    except (OSError, ValueError, KeyError):
        version = "not installed"
    return {"@restatedev/restate-server (npm)": version}


# -- DBOS ---------------------------------------------------------------------------------


def dbos_missing() -> str | None:
    if importlib.util.find_spec("dbos") is None:
        return "`dbos` is not installed (`pip install -e '.[bench]'`)"
    return None


def run_dbos(data_dir: Path, size: Size) -> tuple[float, float]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.dbos_turn",
            "--data-dir",
            str(data_dir),
            "--single",
            str(size.saver_single),
            "--concurrent",
            str(size.saver_concurrent),
            "--callers",
            str(size.saver_callers),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the DBOS turn failed: {out.stderr[-2000:]}")
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return float(figures["single_s"]), float(figures["concurrent_tps"])


# -- Restate ------------------------------------------------------------------------------


def restate_missing() -> str | None:
    if importlib.util.find_spec("restate") is None or importlib.util.find_spec("hypercorn") is None:
        return "`restate-sdk` or `hypercorn` is not installed (`pip install -e '.[bench]'`)"
    if not RESTATE_BIN.exists():
        return "the Restate server is not installed (`npm ci --prefix bench`)"
    if shutil.which("node") is None:
        return "Node.js is not installed (the npm package's launcher needs it)"
    return None


def _wait_http(url: str, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer in {timeout:g} s")


def _wait_port(port: int, timeout: float, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port} after {timeout:g} s")


@contextmanager
def restate_ingress(data_dir: Path) -> Iterator[str]:
    """A restate-server and the Turn service registered with it; yields the ingress URL."""
    ingress, admin, node, service_port = (free_port() for _ in range(4))
    config = data_dir / "restate.toml"
    config.write_text(
        "\n".join(
            [
                # No usage reports: this machine talks to nothing but itself.
                "disable-telemetry = true",
                'cluster-name = "turnkeeper-bench"',
                # One partition per core of this small machine (the default is 24).
                "default-num-partitions = 2",
                'rocksdb-total-memory-size = "512 MiB"',
                'log-filter = "warn"',
                f'bind-address = "127.0.0.1:{node}"',
                f'advertised-address = "http://127.0.0.1:{node}"',
                "[admin]",
                f'bind-address = "127.0.0.1:{admin}"',
                "disable-web-ui = true",
                "[admin.query-engine]",
                'memory-size = "128 MiB"',
                "[ingress]",
                f'bind-address = "127.0.0.1:{ingress}"',
                "",
            ]
        )
    )
    log = open(data_dir / "restate.log", "wb")  # noqa: SIM115 - the child owns it
    server = subprocess.Popen(
        [
            str(RESTATE_BIN),
            "--config-file",
            str(config),
            "--base-dir",
            str(data_dir / "restate-data"),
            "--listen-mode",
            "tcp",
            "--no-logo",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    service = subprocess.Popen(
        [sys.executable, "-m", "bench.restate_turn", "--port", str(service_port)],
        stdout=subprocess.DEVNULL,
        stderr=log,
    )
    log.close()
    try:
        import httpx

        _wait_http(f"http://127.0.0.1:{admin}/health", 120, server)
        _wait_port(service_port, 60, service)
        registered = httpx.post(
            f"http://127.0.0.1:{admin}/deployments",
            json={"uri": f"http://127.0.0.1:{service_port}", "force": True},
            timeout=60,
        )
        if registered.status_code >= 300:
            raise RuntimeError(f"registering the service failed: {registered.text}")
        _wait_http(f"http://127.0.0.1:{ingress}/restate/health", 60, server)
        yield f"http://127.0.0.1:{ingress}"
    except Exception as exc:
        tail = (data_dir / "restate.log").read_bytes()[-2000:].decode(errors="replace")
        raise RuntimeError(f"{exc}; restate log: {tail}") from exc
    finally:
        stop_process(service)
        stop_process(server)


@contextmanager
def restate_turn(data_dir: Path, size: Size) -> Iterator[Callable[[], None]]:
    """One Turn call through a local Restate, warmed up; open while in the context."""
    import httpx

    with restate_ingress(data_dir) as url:
        limits = httpx.Limits(max_connections=size.saver_callers * 2)
        with httpx.Client(base_url=url, timeout=120, limits=limits) as client:

            def turn() -> None:
                answer = client.post("/Turn/run", json={"payload": turns.PAYLOAD, "steps": []})
                answer.raise_for_status()
                result: dict[str, Any] = answer.json()
                if result["steps"] != list(turns.STEPS):
                    raise RuntimeError(f"the service ran {result['steps']}")

            # Restate's first calls after registration are slow (deployment discovery).
            with ThreadPoolExecutor(size.saver_callers) as pool:
                list(pool.map(lambda _: turn(), range(size.saver_callers * 2)))
            yield turn


def _on_host(
    host: alternate.AsyncHost, turn: Callable[[], Awaitable[None]], count: int, callers: int
) -> float:
    """Async turns/s with `callers` tasks on the host's event loop."""
    return host.call(turns.async_concurrent(turn, count, callers))


# -- the comparison -------------------------------------------------------------------------


def run(size: Size) -> Section:
    section = Section(
        key="engines",
        title="A 4-step durable turn: RemoteSaver vs DBOS and Restate",
        method=(
            "The same four steps over ~2 KB of state, each step's result made durable "
            "before the next runs: a LangGraph graph through RemoteSaver "
            '(`durability="sync"`, service in its own process); a DBOS workflow of four '
            "`@DBOS.step`s on its SQLite system database (own process); a Restate service "
            "(Python SDK on hypercorn, four `ctx.run_typed` steps) behind a local "
            "restate-server from npm, called through its HTTP ingress. "
            f"Single: {max(1, size.saver_blocks // size.saver_rounds)} blocks a round, each "
            f"{size.saver_block} turns of RemoteSaver (both APIs), Restate and the floor "
            "one after another, in an order reversed from block to block; a figure is the "
            "median of all its turns, a ratio against Restate the median of the blocks' "
            "ratios (decision 163). DBOS runs in its own process after them: "
            f"{size.saver_single} turns one after another, median, its ratio against "
            "RemoteSaver's median of the same round. Concurrent: "
            f"{max(1, size.saver_conc_rounds // size.saver_rounds)} short rounds a round, "
            f"each {size.saver_conc_turns} turns of RemoteSaver (both APIs), Restate and "
            "the floor from "
            f"{size.saver_callers} threads, in an order reversed from round to round, "
            "both servers up; a ratio against Restate is the median of the short rounds' "
            "ratios (decision 165). DBOS: "
            f"{size.saver_concurrent} turns from {size.saver_callers} threads in its own "
            "process, its ratio against RemoteSaver's median of the same round. "
            "RemoteSaver both ways: `invoke` from threads (blocking), and `ainvoke` as "
            f"{size.saver_callers} tasks on one event loop (async), which is how the "
            "bridge runs turns; each on its default transport (blocking: a unary call per "
            "operation; async: the checkpoint stream per run), and async with every run on "
            "one shared stream (`share_stream=True`, opt-in) under load. "
            f"{size.saver_rounds} rounds; values are medians. Lower time is better; the target "
            "ratios are RemoteSaver's time over theirs."
        ),
    )
    names = ("floor", "remote", "async", "shared", "dbos", "restate")
    # Per round: each variant's median single turn (DBOS's from its own process).
    single: dict[str, list[float]] = {name: [] for name in names}
    conc: dict[str, list[float]] = {name: [] for name in names}
    # Every block of alternated single turns: each variant's median in it.
    blocks: list[dict[str, float]] = []
    every_turn: dict[str, list[float]] = {name: [] for name in names}
    missing = {"dbos": dbos_missing(), "restate": restate_missing()}
    failed: dict[str, str] = {}
    floor = turns.graph_turn(turns.build(None))
    per_round = max(1, size.saver_blocks // size.saver_rounds)
    conc_per_round = max(1, size.saver_conc_rounds // size.saver_rounds)
    count, callers = size.saver_conc_turns, size.saver_callers
    # Every short round under load: each engine's turns/s in it.
    load_rounds: list[dict[str, float]] = []
    for _ in range(size.saver_rounds):
        with scratch_dir("engines") as data_dir:
            with saver.remote_turns(data_dir) as (runs, _pid, address):
                remote = runs["unary"]  # the blocking API's default transport
                with ExitStack() as others, alternate.async_host() as host:
                    async_saver = host.enter(RemoteSaver(address, stream=True))
                    variants = {
                        "floor": alternate.blocking(floor),
                        "remote": alternate.blocking(remote),
                        # As the bridge runs turns: ainvoke, on the run's stream.
                        "async": host.timed(turns.async_graph_turn(turns.build(async_saver))),
                    }
                    if not (missing["restate"] or "restate" in failed):
                        try:
                            restate = others.enter_context(restate_turn(data_dir, size))
                            variants["restate"] = alternate.blocking(restate)
                        except Exception as exc:
                            failed["restate"] = str(exc)
                    measured = alternate.alternate(variants, per_round, size.saver_block)
                    blocks += [
                        {name: median(times[i]) for name, times in measured.items()}
                        for i in range(per_round)
                    ]
                    for name, times in measured.items():
                        single[name].append(alternate.overall(times))
                        every_turn[name] += [t for block in times for t in block]
                    # Under load: short rounds of every engine, the order reversed
                    # from round to round, both servers up (decision 165).
                    shared_saver = host.enter(RemoteSaver(address, stream=True, share_stream=True))
                    async_turn, shared_turn = (
                        turns.async_graph_turn(turns.build(async_saver)),
                        turns.async_graph_turn(turns.build(shared_saver)),
                    )
                    loads: dict[str, Callable[[], float]] = {
                        "floor": partial(turns.concurrent, floor, count, callers),
                        "remote": partial(turns.concurrent, remote, count, callers),
                        "async": partial(_on_host, host, async_turn, count, callers),
                        # Every run on one shared stream (opt-in, decision 155).
                        "shared": partial(_on_host, host, shared_turn, count, callers),
                    }
                    if "restate" in variants:
                        loads["restate"] = partial(turns.concurrent, restate, count, callers)
                    these: list[dict[str, float]] = []
                    for i in range(conc_per_round):
                        order = list(loads) if i % 2 == 0 else list(reversed(loads))
                        these.append({name: loads[name]() for name in order})
                    load_rounds += these
                    for name in loads:
                        conc[name].append(median([r[name] for r in these]))
            # DBOS alone, once turnkeeper and Restate are down: its own process times it.
            if not (missing["dbos"] or "dbos" in failed):
                try:
                    dbos_single, dbos_conc = run_dbos(data_dir, size)
                except Exception as exc:
                    failed["dbos"] = str(exc)
                else:
                    single["dbos"].append(dbos_single)
                    conc["dbos"].append(dbos_conc)

    def block_ratio(mine: str, theirs: str) -> float:
        """The median of the blocks' ratios: turns run within a second of each other."""
        return median([b[mine] / b[theirs] for b in blocks if mine in b and theirs in b])

    s_ = {k: median(every_turn[k]) if every_turn[k] else median(v) for k, v in single.items() if v}
    c_ = {k: median(v) for k, v in conc.items() if v}
    section.metrics = {f"single_{k}_s": v for k, v in s_.items()} | {
        f"concurrent_{k}_tps": v for k, v in c_.items()
    }
    section.rows = [
        Row("RemoteSaver, per turn, single", fmt_ms(s_["remote"])),
        Row(f"RemoteSaver, {size.saver_callers} concurrent", fmt_rate(c_["remote"], " turns/s")),
        Row("RemoteSaver async, per turn, single", fmt_ms(s_["async"])),
        Row(
            f"RemoteSaver async, {size.saver_callers} concurrent",
            fmt_rate(c_["async"], " turns/s"),
        ),
        Row(
            f"RemoteSaver async, one shared stream, {size.saver_callers} concurrent",
            fmt_rate(c_["shared"], " turns/s"),
        ),
        Row(
            "floor (no checkpointer), per turn",
            fmt_ms(s_["floor"]),
            f"RemoteSaver {fmt_ms(s_['remote'])}",
            fmt_ratio(block_ratio("floor", "remote")),
        ),
    ]
    # (single, concurrent): DBOS's from the first round's comparison and this one's.
    targets = {"dbos": ("DBOS", 0.6, 0.4), "restate": ("Restate", 1.0, 1.0)}
    for name, (label, limit, conc_limit) in targets.items():
        why = missing[name] or failed.get(name)
        if why:
            section.rows.append(Row(f"vs {label}", "not measured", why))
            section.notes.append(f"{label} was not measured: {why}")
            continue
        n = len(single[name])  # rounds in which both ran
        mines = (("remote", "blocking"), ("async", "async"), ("shared", "async, shared stream"))
        for mine, api in mines:
            # Time per turn under load is 1/throughput: RemoteSaver's over theirs.
            conc_ratio = (
                median([r[name] / r[mine] for r in load_rounds if name in r])
                if name == "restate"
                else paired_ratio(conc[name], conc[mine][:n])
            )
            key = api.replace(", shared stream", "_shared")
            section.metrics[f"{name}_concurrent_ratio_{key}"] = conc_ratio
            if single[mine]:  # the shared stream is the run's own stream when alone
                single_ratio = (
                    block_ratio(mine, name)
                    if name == "restate"
                    else paired_ratio(single[mine][:n], single[name])
                )
                section.metrics[f"{name}_single_ratio_{key}"] = single_ratio
                section.rows.append(
                    Row(
                        f"vs {label}, per turn, single ({api})",
                        fmt_ms(s_[mine]),
                        f"{label} {fmt_ms(s_[name])}",
                        fmt_ratio(single_ratio),
                        f"≤ {limit:.1f}\u00d7",
                        single_ratio <= limit,
                    )
                )
            section.rows += [
                Row(
                    f"vs {label}, {size.saver_callers} concurrent, time per turn ({api})",
                    fmt_ms(1 / c_[mine]),
                    f"{label} {fmt_ms(1 / c_[name])} ({fmt_rate(c_[name], ' turns/s')})",
                    fmt_ratio(conc_ratio),
                    f"≤ {conc_limit:.1f}\u00d7",
                    conc_ratio <= conc_limit,
                ),
            ]
    return section
