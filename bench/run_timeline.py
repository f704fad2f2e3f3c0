"""One streamed LangGraph API run, taken apart: where each millisecond of a step and
of the first token goes (issue 51), and an A/B of two checkouts' code.

    python -m bench.run_timeline                  # timeline, SQLite and PostgreSQL
    python -m bench.run_timeline --ab OTHER_ROOT  # OTHER_ROOT's server/ and client
                                                  # against this tree's, alternated
    python -m bench.run_timeline --ab OTHER_ROOT --at-once 32
                                                  # the agent host's CPU per run with
                                                  # 32 runs at once, A/B
    python -m bench.run_timeline --share-ab --at-once 32
                                                  # this tree's host with a stream per
                                                  # run (A) and the shared stream (B)
    python -m bench.run_timeline --threads 32     # SQLite, 32 at once: each process's
                                                  # and thread's CPU per run (the bench
                                                  # client's too), and the bare legs

The timeline: the service and `turnkeeper agent` (bench/langgraph_api.py's
turnkeeper_api, on SQLite and on a pgserver PostgreSQL) run with
bench/_timeline_probe.py loaded by a `sitecustomize`, which stamps (wall clock, one
machine) the HTTP request in, each group commit (start, end, size), the hand-off,
the agent's execute, ClaimTurn, the graph's drive, each event emitted, each message
on the checkpoint stream (sent, answered), FinishTurn and each SSE write; the
client stamps each part it reads. A run's stamps are those between its
`runs.stream` call and its last part (runs go one at a time). Printed: the merged
timeline of the median run of each graph (the three-step threadplane graph and the
one-node first-token graph), in ms from `runs.stream`.

The A/B: both checkouts' services (and hosts) side by side, without the probe,
rounds alternated (A B B A ...), each round `--runs` streamed runs and first
tokens; medians per round and the median of the rounds' ratios B/A. With
`--at-once N`, a round is `--runs` batches of N streamed runs of the three-step graph
at once, and the figures are the agent host process's CPU seconds (user + system,
from /proc) per finished run, and runs/s. On PostgreSQL each side has a cluster of
its own, and every round also gives the CPU per streamed run of the service's
processes (service, agent host, NATS) and of its cluster (postmaster, backends).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from bench.common import REPO_BENCH, free_port, scratch_dir, thread_seconds
from bench.langgraph_api import ASSISTANT, MODES, QUESTION, TOKENS, turnkeeper_api

PROBE = REPO_BENCH / "_timeline_probe.py"


@contextmanager
def stack(
    data_dir: Path,
    database_url: str | None,
    *,
    timeline: Path | None = None,
    code_root: Path | None = None,
    agent_extra: dict[str, str] | None = None,
) -> Iterator[tuple[str, tuple[int, int]]]:
    """bench/langgraph_api.py's turnkeeper_api, with the probe (`timeline`) and/or
    another checkout's code first on the path (`code_root`); yields the URL and the
    pids of the agent host and the service."""
    paths: list[str] = []
    if timeline is not None:
        site = data_dir / "site"
        site.mkdir(exist_ok=True)
        (site / "sitecustomize.py").write_text(
            f"import runpy\nrunpy.run_path({str(PROBE)!r}, run_name='_timeline_probe')\n"
        )
        paths.append(str(site))
    if code_root is not None:
        paths += [str(code_root / "server"), str(code_root / "clients" / "python")]
    base = {
        "PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    }
    if timeline is not None:
        base["TURNKEEPER_TIMELINE"] = str(timeline)
    with turnkeeper_api(
        data_dir,
        database_url,
        service_env={**base, "TURNKEEPER_TIMELINE_ROLE": "service"},
        agent_env={**base, **(agent_extra or {}), "TURNKEEPER_TIMELINE_ROLE": "agent"},
    ) as (url, pids):
        service, host = pids[0], pids[1]  # (service, agent host, NATS)
        _TREES[url] = pids
        yield url, (host, service)


# The service's processes (service, agent host, NATS) by URL, and the cluster of a
# PostgreSQL side: what a round's CPU per run counts (`_ab_round`).
_TREES: dict[str, list[int]] = {}
_CLUSTERS: dict[str, int] = {}


def _cpu(url: str) -> tuple[float, float]:
    from bench.aegra import tree_cpu

    cluster = _CLUSTERS.get(url)
    return tree_cpu(_TREES[url]), tree_cpu([cluster]) if cluster else 0.0


async def streamed(client: Any, assistant: str, modes: Any) -> tuple[int, list[tuple[int, str]]]:
    """One run: its start (ns) and each part's (arrival ns, event)."""
    parts: list[tuple[int, str]] = []
    started = time.time_ns()
    async for part in client.runs.stream(None, assistant, input=QUESTION, stream_mode=modes):
        parts.append((time.time_ns(), part.event))
    return started, parts


def first_token(parts: list[tuple[int, str]], started: int) -> float:
    return next((t - started) / 1e6 for t, e in parts if e.startswith("messages"))


# -- the timeline -----------------------------------------------------------------------


async def _timeline_runs(url: str, runs: int) -> dict[str, list[tuple[int, list[Any]]]]:
    from langgraph_sdk import get_client

    client = get_client(url=url)
    out: dict[str, list[tuple[int, list[Any]]]] = {"steps": [], "token": []}
    for _ in range(2):  # warm up
        await streamed(client, ASSISTANT, MODES)
        await streamed(client, TOKENS, ["messages-tuple"])
    for _ in range(runs):
        out["steps"].append(await streamed(client, ASSISTANT, MODES))
        out["token"].append(await streamed(client, TOKENS, ["messages-tuple"]))
    return out


def _stamps(path: Path) -> list[tuple[int, str, str, str]]:
    rows = []
    for line in path.read_text().splitlines():
        ns, who, thread, label = line.split(" ", 3)
        rows.append((int(ns), who, thread, label))
    return sorted(rows)


def _print_run(
    title: str, started: int, parts: list[tuple[int, str]], stamps: list[tuple[int, str, str, str]]
) -> None:
    end = parts[-1][0]
    merged = [(ns, who, label) for ns, who, _, label in stamps if started <= ns <= end]
    merged += [(ns, "client", f"part {event}") for ns, event in parts]
    merged.sort()
    print(f"\n{title}: {(end - started) / 1e6:.1f} ms")
    last = started
    for ns, who, label in merged:
        print(f"  {(ns - started) / 1e6:7.2f} (+{(ns - last) / 1e6:5.2f})  {who:8} {label}")
        last = ns


def timeline(backends: list[str], runs: int) -> None:
    from bench.postgres import postgres

    with ExitStack() as es:
        root = es.enter_context(scratch_dir("timeline"))
        new_database = es.enter_context(postgres()) if "postgres" in backends else None
        for backend in backends:
            data = root / backend
            data.mkdir()
            stamps_file = data / "stamps.txt"
            url_db = new_database() if backend == "postgres" and new_database else None
            with stack(data, url_db, timeline=stamps_file) as (url, _):
                mark = time.time_ns()
                out = asyncio.run(_timeline_runs(url, runs))
            stamps = [s for s in _stamps(stamps_file) if s[0] >= mark]
            for kind, done in out.items():
                key = (
                    (lambda r: r[1][-1][0] - r[0])
                    if kind == "steps"
                    else (lambda r: first_token(r[1], r[0]))
                )
                ordered = sorted(done, key=key)
                median_run = ordered[len(ordered) // 2]
                totals = [(r[1][-1][0] - r[0]) / 1e6 for r in done]
                tokens = [first_token(r[1], r[0]) for r in done if kind == "token"]
                summary = f"{backend} {kind}: run median {statistics.median(totals):.1f} ms"
                if tokens:
                    summary += f", first token median {statistics.median(tokens):.1f} ms"
                print(f"\n=== {summary}")
                _print_run(f"{backend} {kind}, the median run", *median_run, stamps)


# -- A/B --------------------------------------------------------------------------------


async def _ab_round(
    url: str,
    runs: int,
    pids: tuple[int, int],
    at_once: int,
    latencies: list[tuple[float, float]] | None = None,
) -> tuple[float, ...]:
    """Medians of a round: (streamed run, first token) in ms, or with `at_once` (the
    agent host's and the service's CPU ms per run, runs/s; each run's (time, first
    token) in ms appended to `latencies`)."""
    from langgraph_sdk import get_client

    if at_once:
        s0, d0 = _cpu(url)
        host, service, rate, finished = await _at_once_round(url, runs, pids, at_once, latencies)
        s1, d1 = _cpu(url)
        n = max(1, finished)
        return host, service, rate, (s1 - s0) * 1e3 / n, (d1 - d0) * 1e3 / n
    client = get_client(url=url)
    totals, tokens = [], []
    s0, d0 = _cpu(url)
    for _ in range(runs):
        started, parts = await streamed(client, ASSISTANT, MODES)
        totals.append((parts[-1][0] - started) / 1e6)
    s1, d1 = _cpu(url)
    for _ in range(runs):
        started, parts = await streamed(client, TOKENS, ["messages-tuple"])
        tokens.append(first_token(parts, started))
    return (
        statistics.median(totals),
        statistics.median(tokens),
        (s1 - s0) * 1e3 / runs,
        (d1 - d0) * 1e3 / runs,
    )


async def _at_once_round(
    url: str,
    batches: int,
    pids: tuple[int, int],
    at_once: int,
    latencies: list[tuple[float, float]] | None = None,
) -> tuple[float, float, float, int]:
    from langgraph_sdk import get_client

    from bench.common import cpu_seconds

    clients = [get_client(url=url, timeout=(5.0, 300.0, 300.0, 300.0)) for _ in range(2)]
    modes = [*MODES, "messages-tuple"]

    async def one(i: int) -> None:
        started, parts = await streamed(clients[i % 2], ASSISTANT, modes)
        if latencies is not None:
            latencies.append(((parts[-1][0] - started) / 1e6, first_token(parts, started)))

    def used() -> list[float]:
        return [sum(cpu_seconds(pid).values()) for pid in pids]

    host, service, rates = [], [], []
    total = 0
    for _ in range(batches):
        before = used()
        started = time.perf_counter()
        done = await asyncio.gather(*(one(i) for i in range(at_once)), return_exceptions=True)
        wall = time.perf_counter() - started
        finished = sum(not isinstance(d, BaseException) for d in done)
        total += finished
        if finished < at_once:
            print(f"{at_once - finished} runs failed: {done!r:.300}", file=sys.stderr)
        after = used()
        host.append((after[0] - before[0]) * 1e3 / max(1, finished))
        service.append((after[1] - before[1]) * 1e3 / max(1, finished))
        rates.append(finished / wall)
    return statistics.median(host), statistics.median(service), statistics.median(rates), total


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[round(q * (len(ordered) - 1))] if ordered else 0.0


SHARE_SIDES = {
    "A": {"TURNKEEPER_SAVER_SHARE_STREAM": "0"},
    "B": {"TURNKEEPER_SAVER_SHARE_STREAM": "1"},
}


def ab(
    other: Path | None,
    backends: list[str],
    runs: int,
    rounds: int,
    at_once: int = 0,
    *,
    share: bool = False,
) -> None:
    """`other`'s code (A) against this tree's (B); with `share`, this tree on both
    sides, the host's stream per run (A) against its shared stream (B)."""
    from bench.postgres import postgres
    from bench.postgres_section import _postmaster

    with ExitStack() as es:
        root = es.enter_context(scratch_dir("timeline-ab"))
        urls: dict[tuple[str, str], tuple[str, tuple[int, int]]] = {}
        for backend in backends:
            for side, code in (("A", None if share else other), ("B", None)):
                data = root / f"{backend}-{side}"
                data.mkdir()
                url_db = es.enter_context(postgres())() if backend == "postgres" else None
                extra = SHARE_SIDES[side] if share else None
                urls[backend, side] = es.enter_context(
                    stack(data, url_db, code_root=code, agent_extra=extra)
                )
                if url_db is not None:
                    _CLUSTERS[urls[backend, side][0]] = _postmaster(url_db)
        figures: dict[tuple[str, str], list[tuple[float, ...]]] = {k: [] for k in urls}
        latencies: dict[tuple[str, str], list[tuple[float, float]]] = {k: [] for k in urls}

        async def go() -> None:
            for url, pids in urls.values():  # warm up
                await _ab_round(url, 2, pids, at_once)
            for r in range(rounds):
                for backend in backends:
                    for side in ("A", "B") if r % 2 == 0 else ("B", "A"):
                        url, pids = urls[backend, side]
                        figures[backend, side].append(
                            await _ab_round(url, runs, pids, at_once, latencies[backend, side])
                        )

        asyncio.run(go())
    what_ = (
        ("host CPU/run", "service CPU/run", "runs/s", "tree CPU/run", "db CPU/run")
        if at_once
        else ("streamed run", "first token", "tree CPU/run", "db CPU/run")
    )
    sides = (
        "A: a stream per run (TURNKEEPER_SAVER_SHARE_STREAM=0); B: shared (=1), this tree"
        if share
        else f"A: {other}; B: this tree"
    )
    print(
        f"{sides}. {rounds} rounds of {runs} "
        + (f"batches of {at_once} at once" if at_once else "runs")
        + ", medians (ms)."
    )
    for backend in backends:
        a, b = figures[backend, "A"], figures[backend, "B"]
        # The service's processes and its cluster together, per run.
        a = [(*x, x[-2] + x[-1]) for x in a]
        b = [(*y, y[-2] + y[-1]) for y in b]
        for i, what in enumerate((*what_, "tree+db CPU/run")):
            if backend != "postgres" and what.startswith(("db", "tree+db")):
                continue
            ratios = [y[i] / x[i] for x, y in zip(a, b, strict=True) if x[i]]
            print(
                f"{backend:8} {what:15}  A {statistics.median(x[i] for x in a):6.1f}"
                f"  B {statistics.median(y[i] for y in b):6.1f}"
                f"  B/A {statistics.median(ratios):.2f}  rounds A "
                + " ".join(f"{x[i]:.1f}" for x in a)
                + " | B "
                + " ".join(f"{y[i]:.1f}" for y in b)
            )
        for i, what in enumerate(("run", "first token") if at_once else ()):
            xs = [lat[i] for lat in latencies[backend, "A"]]
            ys = [lat[i] for lat in latencies[backend, "B"]]
            print(
                f"{backend:8} {what:15}  p50 A {percentile(xs, 0.5):7.1f}  B {percentile(ys, 0.5):7.1f}"
                f"  p99 A {percentile(xs, 0.99):7.1f}  B {percentile(ys, 0.99):7.1f}"
                f"  ({len(xs)}; {len(ys)} runs)"
            )


# -- CPU per run by process and thread (round twenty-one) --------------------------------


def _thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds by thread name ("loop" for the main thread)."""
    out: dict[str, float] = {}
    for task, name, used in thread_seconds(pid):
        key = "loop" if task == str(pid) else name
        out[key] = out.get(key, 0.0) + used
    return out


async def _threads_round(url: str, pids: list[int], at_once: int, batches: int) -> None:
    from langgraph_sdk import get_client

    clients = [get_client(url=url, timeout=(5.0, 300.0, 300.0, 300.0)) for _ in range(2)]
    names = {"service": pids[0], "host": pids[1], "nats": pids[2], "client": os.getpid()}

    async def batch() -> tuple[int, float]:
        started = time.perf_counter()
        done = await asyncio.gather(
            *(streamed(clients[i % 2], ASSISTANT, MODES) for i in range(at_once)),
            return_exceptions=True,
        )
        return sum(not isinstance(d, BaseException) for d in done), time.perf_counter() - started

    await batch()  # warm up
    before = {k: _thread_cpu(p) for k, p in names.items()}
    runs, rates, wall = 0, [], 0.0
    for _ in range(batches):
        finished, took = await batch()
        runs, wall = runs + finished, wall + took
        rates.append(finished / took)
    after = {k: _thread_cpu(p) for k, p in names.items()}
    print(
        f"{at_once} at once, {batches} batches: runs/s median {statistics.median(rates):.1f}"
        f" (load average {os.getloadavg()[0]:.1f})"
    )
    total = 0.0
    for k in names:
        used = {t: after[k][t] - before[k].get(t, 0.0) for t in after[k]}
        spent = sum(used.values())
        total += spent
        print(f"  {k:8} {spent * 1e3 / runs:6.2f} ms/run  {spent / wall * 100:5.1f}% of a core")
        for t, v in sorted(used.items(), key=lambda kv: -kv[1])[:3]:
            if v > 0.005:
                print(f"    {t:24} {v * 1e3 / runs:6.2f} ms/run  {v / wall * 100:5.1f}% of a core")
    cores = os.cpu_count() or 1
    print(
        f"  all      {total * 1e3 / runs:6.2f} ms/run  {total / wall * 100:5.1f}% of {cores} cores'"
        f" {cores * 100}%"
    )


async def _legs(address: str, rounds: int = 300) -> tuple[float, float, float]:
    """Bare legs on this machine, medians in ms: a grpc.aio stream round trip of a
    3 KB frame, a NATS request/reply round trip, and an HTTP POST answered with two
    SSE events, read whole (httpx to aiohttp)."""
    import httpx
    import nats
    from aiohttp import web
    from grpc import aio
    from turnkeeper_server.messaging.embedded import EmbeddedNats

    from bench.transport_floor import _METHOD

    async def timed(step: Any) -> float:
        for _ in range(20):
            await step()
        times = []
        for _ in range(rounds):
            started = time.perf_counter()
            await step()
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1e3

    async with aio.insecure_channel(address) as channel:
        open_stream: Any = channel.stream_stream
        call = open_stream(_METHOD)()
        frame = b"\0" * 3000

        async def grpc_leg() -> None:
            await call.write(frame)
            await call.read()

        grpc_ms = await timed(grpc_leg)
        call.cancel()
    server = EmbeddedNats()
    nats_url = server.start()
    try:
        asking, answering = await nats.connect(nats_url), await nats.connect(nats_url)

        async def answer(msg: Any) -> None:
            await msg.respond(b"ok")

        await answering.subscribe("legs", cb=answer)
        await answering.flush()

        async def nats_leg() -> None:
            await asking.request("legs", b"\0" * 1000, timeout=5)

        nats_ms = await timed(nats_leg)
        await asking.close()
        await answering.close()
    finally:
        server.stop()

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"event: metadata\ndata: {}\n\n")
        await response.write(b"event: values\ndata: {}\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/s", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    async with httpx.AsyncClient() as client:

        async def http_leg() -> None:
            async with client.stream("POST", f"http://127.0.0.1:{port}/s", json=QUESTION) as r:
                async for _ in r.aiter_bytes():
                    pass

        http_ms = await timed(http_leg)
    await runner.cleanup()
    return grpc_ms, nats_ms, http_ms


def threads(at_once: int, batches: int, rounds: int) -> None:
    from bench.transport_floor import answering_process

    with scratch_dir("timeline-threads") as root, stack(root, None) as (url, _):
        for _ in range(rounds):
            asyncio.run(_threads_round(url, _TREES[url], at_once, batches))
    with answering_process() as address:
        grpc_ms, nats_ms, http_ms = asyncio.run(_legs(address))
    print(
        f"bare legs: grpc.aio stream round trip (3 KB) {grpc_ms:.3f} ms; NATS request/reply"
        f" {nats_ms:.3f} ms; HTTP POST + SSE answer read whole {http_ms:.3f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.run_timeline")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--ab", type=Path, metavar="OTHER_ROOT", help="A/B against a checkout")
    parser.add_argument(
        "--share-ab",
        action="store_true",
        help="this tree's host with a stream per run (A) against the shared stream (B)",
    )
    parser.add_argument(
        "--at-once",
        type=int,
        default=0,
        metavar="N",
        help="with --ab or --share-ab: the agent host's CPU per run with N runs at once (--runs batches)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        metavar="N",
        help="SQLite, N runs at once (--runs batches, --rounds rounds): CPU per run by process and thread, and the bare legs",
    )
    args = parser.parse_args()
    if args.threads:
        threads(args.threads, args.runs, args.rounds)
        return
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    if args.ab or args.share_ab:
        ab(args.ab, backends, args.runs, args.rounds, args.at_once, share=args.share_ab)
    else:
        timeline(backends, args.runs)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
