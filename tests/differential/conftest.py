"""The reference side of the differential suite: `langgraph dev` started once per
session (per xdist worker; the suite's tests share one `xdist_group`), each client's
observation of it made once, and the JS SDK's package installed once. For the
TypeScript project (graphs_ts/), LangGraph.js's own dev server (`langgraphjs dev`
from js_reference/'s locked packages) is the reference, started and observed once
as well.

A reference is observed in a thread of its own, started by its fixture: the drivers
run against it while the test's turnkeeper and host start (decision 460), and the
test awaits what they saw (`await asyncio.wrap_future(reference)`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

import pytest

from tests.support import reference as reference_server
from tests.support.node import NO_PROXY_ENV, NODE, NPM, npm_ci

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
GRAPHS = HERE / "graphs"
GRAPHS_TS = HERE / "graphs_ts"
JS_REFERENCE = HERE / "js_reference"
SCENARIOS = HERE / "scenarios.json"
DRIVER_TIMEOUT = 240


def python_driver(url: str) -> list[str]:
    return [sys.executable, "-m", "tests.differential.driver", url]


def js_driver(package: Path, url: str) -> list[str]:
    assert NODE is not None
    return [NODE, str(package / "driver.mjs"), url, str(SCENARIOS)]


def parse(client: str, out: bytes, err: bytes, returncode: int | None) -> Any:
    assert returncode == 0, f"the {client} driver failed ({returncode}):\n{err.decode()}"
    return json.loads(out.decode().strip().splitlines()[-1])


@pytest.fixture(scope="session")
def js_package(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """A copy of js/ with its locked packages installed; None without node and npm
    (then only the Python client runs, unless TURNKEEPER_REQUIRE_REFERENCE=1)."""
    if NODE is None or NPM is None:
        if os.environ.get("TURNKEEPER_REQUIRE_REFERENCE") == "1":
            pytest.fail("node and npm are not on PATH: the JS SDK cannot be run")
        return None
    package = tmp_path_factory.mktemp("differential-js") / "js"
    shutil.copytree(HERE / "js", package, ignore=shutil.ignore_patterns("node_modules"))
    npm_ci(package)
    return package


def _drain(stream: IO[str], log: Path) -> None:
    with log.open("a") as out:
        for line in stream:
            out.write(line)


@pytest.fixture(scope="session")
def reference_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`langgraph dev` serving graphs/ (a copy: it writes its state's flushes beside
    the config), started once for every scenario and client."""
    reference_server.require_reference()
    app = tmp_path_factory.mktemp("differential-reference") / "app"
    shutil.copytree(GRAPHS, app, ignore=shutil.ignore_patterns("__pycache__"))
    port = reference_server.free_port()
    with serving(
        reference_server.command(app / "langgraph.json", port), app, "Application started up"
    ):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def serving(command: list[str], app: Path, started: str) -> Iterator[None]:
    """A reference server running `command` in `app` until the block ends, entered
    once its log says `started` (its output kept in app/server.log)."""
    proc = subprocess.Popen(
        command,
        cwd=app,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={
            **os.environ,
            **NO_PROXY_ENV,
            # No usage report, no tracing: both CLIs read these (they run offline).
            **reference_server.ENV,
        },
    )
    assert proc.stdout is not None
    log = app / "server.log"
    try:
        # Its start line, awaited: reading blocks until it comes or the process ends.
        with log.open("w") as out:
            for line in proc.stdout:
                out.write(line)
                if started in line:
                    break
            else:
                pytest.fail(f"{command[:3]} exited ({proc.wait()}):\n{log.read_text()}")
        threading.Thread(target=_drain, args=(proc.stdout, log), daemon=True).start()
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def observe_reference(url: str, js_package: Path | None) -> dict[str, Any]:
    """What each client was shown by a reference server, raw; both drivers at once."""
    commands = {"python": python_driver(url)}
    if js_package is not None:
        commands["js"] = js_driver(js_package, url)
    env = {**os.environ, **NO_PROXY_ENV}
    procs = {
        client: subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for client, cmd in commands.items()
    }
    seen = {}
    for client, proc in procs.items():
        out, err = proc.communicate(timeout=DRIVER_TIMEOUT)
        seen[client] = parse(client, out, err, proc.returncode)
    return seen


@contextmanager
def observing(url: str, js_package: Path | None) -> Iterator[Future[dict[str, Any]]]:
    """observe_reference, begun in a thread; the block waits for it as it ends (the
    server outlives its drivers)."""
    pool = ThreadPoolExecutor(1, thread_name_prefix="reference-observer")
    try:
        yield pool.submit(observe_reference, url, js_package)
    finally:
        pool.shutdown(wait=True)


@pytest.fixture(scope="session")
def reference(reference_url: str, js_package: Path | None) -> Iterator[Future[dict[str, Any]]]:
    """What each client was shown by `langgraph dev`, raw; both drivers at once,
    begun now, awaited by the test."""
    with observing(reference_url, js_package) as seen:
        yield seen


def require_node() -> None:
    """Skips without node and npm, fails then under TURNKEEPER_REQUIRE_REFERENCE=1."""
    if NODE is None or NPM is None:
        if os.environ.get("TURNKEEPER_REQUIRE_REFERENCE") == "1":
            pytest.fail("node and npm are not on PATH: LangGraph.js's dev server cannot run")
        pytest.skip(reason="node and npm are not on PATH: LangGraph.js's dev server cannot run")


@pytest.fixture(scope="session")
def ts_reference_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """LangGraph.js's dev server (`langgraphjs dev`, js_reference/'s locked
    @langchain/langgraph-cli) serving graphs_ts/: a copy inside the installed
    package, so the graphs import the package's LangGraph.js."""
    require_node()
    assert NODE is not None
    package = tmp_path_factory.mktemp("differential-ts-reference") / "js_reference"
    shutil.copytree(JS_REFERENCE, package, ignore=shutil.ignore_patterns("node_modules"))
    npm_ci(package)
    app = package / "app"
    shutil.copytree(GRAPHS_TS, app)
    cli = package / "node_modules" / "@langchain" / "langgraph-cli" / "dist" / "cli" / "cli.mjs"
    port = reference_server.free_port()
    command = [
        NODE,
        str(cli),
        "dev",
        "--no-browser",
        "--no-reload",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--config",
        str(app / "langgraph.json"),
    ]
    with serving(command, app, "Server running at"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def ts_reference(
    ts_reference_url: str, js_package: Path | None
) -> Iterator[Future[dict[str, Any]]]:
    """What each client was shown by LangGraph.js's dev server, raw; begun now,
    awaited by the test."""
    with observing(ts_reference_url, js_package) as seen:
        yield seen
