"""`turnkeeper dev [langgraph.json]`: one command from a langgraph.json to durable
graphs answering the LangGraph API.

In this process: the service on the project's own SQLite files (``.turnkeeper/``
next to the langgraph.json), a bundled nats-server, and the LangGraph API with the
console on one HTTP port (2024, as ``langgraph dev``, or a free one when that is
taken). In a child process: ``turnkeeper agent langgraph.json``, told where the
service and NATS are. The graphs live in the child so that a crash of theirs, even a
``kill -9``, is what it is in production: the child is started again under the same
replica name, and its startup Redrive takes the interrupted runs back from their last
checkpoint (docs/langgraph-api.md, "turnkeeper dev").

SIGINT (Ctrl-C) and SIGTERM stop everything in order at any point, start-up
included: the graphs first (a running turn gets DEV_GRACE seconds, the rest is
re-driven at the next start), then the service, then NATS. The stop is bounded as
`serve`'s is (decision 319): past ``--shutdown-timeout`` a watchdog thread ends the
process (status 1), and a second signal ends it at once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import errno
import json
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Final, NoReturn

from turnkeeper import _io_engine as io_engine
from turnkeeper import _local_services as local_services

from turnkeeper_server import logs
from turnkeeper_server import main as serve_main
from turnkeeper_server.app import TurnkeeperServer, create_server
from turnkeeper_server.config import Settings
from turnkeeper_server.durations import parse_duration
from turnkeeper_server.errors import Unavailable
from turnkeeper_server.messaging.embedded import EmbeddedNats
from turnkeeper_server.security.transport import InsecureListen
from turnkeeper_server.store.lockfile import StoreInUse

log = logging.getLogger("turnkeeper.dev")

HELP = "run the service and host a langgraph.json's graphs, for development"

#: The port ``langgraph dev`` serves on; a free one when it is taken.
DEFAULT_HTTP_PORT: Final = 2024
#: The gRPC port ``turnkeeper`` commands look at by default; a free one when taken.
DEFAULT_GRPC_PORT: Final = 50051
#: Seconds a running turn gets to finish when dev stops (the rest is re-driven).
DEV_GRACE: Final = 2.0
#: The longest a stop may take (decision 319): the graphs' stop (DEV_GRACE and 3 s)
#: and the service's (DEV_GRACE, bounded by it) fit in it, well under Kubernetes' 30 s.
DEV_SHUTDOWN_TIMEOUT: Final = 10.0
#: The graphs' process is started again after an exit, at most this often.
RESTART_BACKOFF: Final = (0.2, 5.0)
#: The host's exit status for a langgraph.json or a graph it cannot load.
HOST_USAGE_ERROR: Final = 2
#: Seconds between two looks at the project's files (reload).
RELOAD_POLL: Final = 1.0
#: What a reload watches: sources and settings, not data, caches or environments.
WATCHED_SUFFIXES: Final = (
    ".py",
    ".json",
    ".env",
    ".toml",
    ".yaml",
    ".yml",
    ".ts",
    ".mts",
    ".cts",
    ".js",
    ".mjs",
    ".cjs",
)
SKIPPED_DIRS: Final = frozenset({"__pycache__", "node_modules", "site-packages", "venv"})


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "config",
        nargs="?",
        type=Path,
        default=Path("langgraph.json"),
        metavar="LANGGRAPH_JSON",
        help="the project's langgraph.json (default: ./langgraph.json)",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port of the LangGraph API and the console (default {DEFAULT_HTTP_PORT}, "
        "or a free port when that one is taken; 0: any free port)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where turns.db and sessions.db go (default: .turnkeeper next to the langgraph.json)",
    )
    parser.add_argument(
        "--nats-url",
        default=None,
        help="a NATS server to use instead of the bundled one (no environment variable "
        "is read: dev runs on its own defaults)",
    )
    parser.add_argument(
        "--no-reload",
        dest="reload",
        action="store_false",
        help="do not start the graphs again when the project's files change",
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=parse_duration,
        default=DEV_SHUTDOWN_TIMEOUT,
        metavar="DURATION",
        help="longest a stop may take after SIGTERM or SIGINT, whatever hangs; past it "
        "dev exits at once (status 1), and a second signal ends it at once "
        f"(default {DEV_SHUTDOWN_TIMEOUT:g} s)",
    )
    parser.add_argument("--log-level", default="INFO")


def graph_names(config: Path) -> list[str]:
    """The graphs a langgraph.json names (the host checks the rest when it loads
    them); ValueError saying what is wrong."""
    try:
        raw = json.loads(config.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(
            f"{config}: no such file. Run `turnkeeper dev` in a folder with a "
            "langgraph.json, or name one: turnkeeper dev path/to/langgraph.json"
        ) from None
    except OSError as exc:
        raise ValueError(f"{config}: cannot read it: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"{config}: not JSON: {exc}") from None
    graphs = raw.get("graphs") if isinstance(raw, dict) else None
    if not isinstance(graphs, dict) or not graphs:
        raise ValueError(f'{config}: needs "graphs": {{"name": "./file.py:graph", ...}}')
    return [str(name) for name in graphs]


def sources(root: Path) -> dict[str, int]:
    """The project's watched files under `root` and their modification times; hidden
    folders (.turnkeeper, .venv, .git) and caches are skipped."""
    found: dict[str, int] = {}
    for folder, folders, files in os.walk(root):
        folders[:] = [d for d in folders if not d.startswith(".") and d not in SKIPPED_DIRS]
        for name in files:
            if name.endswith(WATCHED_SUFFIXES) or name == ".env":
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    found[path] = os.stat(path).st_mtime_ns
    return found


def port_free(host: str, port: int) -> bool:
    """Whether `port` can be bound now without SO_REUSEPORT (gRPC sets it, and would
    share a port another service holds instead of failing)."""
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def dev_settings(args: argparse.Namespace, config: Path, nats_url: str | None) -> Settings:
    """`serve`'s settings with dev's defaults: no tokens, no environment's service."""
    parser = argparse.ArgumentParser()
    serve_main.add_serve_arguments(parser)
    serve = parser.parse_args([])
    data_dir = args.data_dir or config.parent / ".turnkeeper"
    data_dir.mkdir(parents=True, exist_ok=True)
    grpc_port = DEFAULT_GRPC_PORT if port_free("127.0.0.1", DEFAULT_GRPC_PORT) else 0
    serve.listen = f"127.0.0.1:{grpc_port}"
    serve.data_dir = data_dir
    serve.database_url = None
    serve.tokens_file = None
    serve.insecure = False
    serve.langgraph_config = config
    serve.http_port = DEFAULT_HTTP_PORT if args.port is None else args.port
    settings = serve_main.settings_from_args(serve, nats_url)
    return dataclasses.replace(
        settings,
        http_any_port_if_busy=args.port is None,
        shutdown_grace=DEV_GRACE,
        shutdown_timeout=args.shutdown_timeout,
    )


class GraphHost:
    """``turnkeeper agent langgraph.json`` as a child process, started again when it
    exits until :meth:`stop`. Its output is ours (inherited)."""

    def __init__(self, config: Path, address: str, nats_url: str, *, reload: bool) -> None:
        self.config = config
        self.reload = reload
        # Set when the project's files change: the next exit is a reload.
        self.changed = asyncio.Event()
        env = dict(os.environ)
        # Told where everything is; whatever the environment says of another service
        # is not this one's.
        for key in list(env):
            if key.startswith(("TURNKEEPER_TOKEN", "TURNKEEPER_TLS", "TURNKEEPER_NATS_")):
                del env[key]
        env.update(
            TURNKEEPER_ADDRESS=address,
            NATS_URL=nats_url,
            TURNKEEPER_NATS_URL=nats_url,
            TURNKEEPER_HEALTH_LISTEN="127.0.0.1:0",
            TURNKEEPER_REPLICA=env.get("TURNKEEPER_REPLICA") or f"dev-{socket.gethostname()}",
            TURNKEEPER_SHUTDOWN_GRACE=str(DEV_GRACE),
            # The host ends when dev does, even by SIGKILL (turnkeeper.agent.host).
            TURNKEEPER_DIE_WITH_PARENT=str(os.getpid()),
            PYTHONUNBUFFERED="1",
        )
        self.env = env
        self.process: asyncio.subprocess.Process | None = None

    async def _spawn(self) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            # `turnkeeper agent`: says what to install when the agent extra is missing.
            "-m",
            "turnkeeper.operator",
            "agent",
            str(self.config),
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            # Its own process group: a Ctrl-C in the terminal reaches dev alone, which
            # stops the graphs first, in order.
            start_new_session=True,
        )
        print(f"turnkeeper dev: graphs hosted by pid {process.pid}", flush=True)
        return process

    async def run(self) -> int:
        """Keep the graphs' process running (started again after a crash, and after a
        change of the project's files when reloading); returns the host's status when
        it ends on a usage error (a langgraph.json or a graph it cannot load) and dev
        does not reload."""
        watching = asyncio.create_task(self._watch()) if self.reload else None
        try:
            return await self._keep_running()
        finally:
            if watching is not None:
                watching.cancel()

    async def _keep_running(self) -> int:
        delay = RESTART_BACKOFF[0]
        while True:
            started = time.monotonic()
            self.changed.clear()
            self.process = await self._spawn()
            code = await self.process.wait()
            if self.changed.is_set():
                delay = RESTART_BACKOFF[0]
                continue
            if code == HOST_USAGE_ERROR:
                if not self.reload:
                    log.error("the graphs could not be loaded (above); fix them and run dev again")
                    return code
                log.error(
                    "the graphs could not be loaded (above): dev loads them again when "
                    "a file of the project changes"
                )
                await self.changed.wait()
                continue
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            if time.monotonic() - started > 30:
                delay = RESTART_BACKOFF[0]
            log.warning(
                "the graphs' process (pid %d) ended (%s); starting it again: its startup "
                "Redrive takes back the runs it was running",
                self.process.pid,
                how,
            )
            await asyncio.sleep(delay)
            delay = min(delay * 2, RESTART_BACKOFF[1])

    async def _watch(self) -> None:
        """Every RELOAD_POLL seconds, the project's sources compared with the last
        look; on a change, the graphs' process is stopped (SIGTERM: its running turns
        get DEV_GRACE, then the new process re-drives them) and started again."""
        seen = await asyncio.to_thread(sources, self.config.parent)
        while True:
            await asyncio.sleep(RELOAD_POLL)
            now = await asyncio.to_thread(sources, self.config.parent)
            if now == seen:
                continue
            edited = sorted(
                f.removeprefix(f"{self.config.parent}{os.sep}")
                for f in set(now) ^ set(seen) | {f for f in now if seen.get(f) != now[f]}
            )
            seen = now
            print(
                f"turnkeeper dev: {', '.join(edited[:5])} changed: reloading the graphs", flush=True
            )
            self.changed.set()
            process = self.process
            if process is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)

    async def stop(self) -> None:
        """SIGTERM, then SIGKILL when it is not gone within its grace and 3 s."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), DEV_GRACE + 3)
        except TimeoutError:
            log.warning("the graphs' process did not stop in time: killed")
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            await process.wait()


async def _announced(server: TurnkeeperServer, graphs: list[str]) -> None:
    """Until every graph is an assistant (its bridge announced it)."""
    directory = server.engine.directory
    waiting = set(graphs) - set(directory.agents())
    every = asyncio.Event()

    def listed(agent: str) -> None:
        waiting.discard(agent)
        if not waiting:
            every.set()

    if waiting:
        directory.on_listed.append(listed)
        try:
            await every.wait()
        finally:
            directory.on_listed.remove(listed)


async def _serve_and_host(args: argparse.Namespace, config: Path, graphs: list[str]) -> int:
    embedded: EmbeddedNats | None = None
    server: TurnkeeperServer | None = None
    host: GraphHost | None = None
    hosting: asyncio.Task[int] | None = None
    announced: asyncio.Task[None] | None = None
    published: Path | None = None
    try:
        nats_url = args.nats_url
        if nats_url is None:
            embedded = EmbeddedNats()
            nats_url = embedded.start()
            log.info("started a bundled nats-server at %s", nats_url)
        settings = dev_settings(args, config, nats_url)
        try:
            server = await create_server(settings)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise ValueError(
                f"port {args.port} is in use: pass another --port, or --port 0 for any free one"
            ) from None
        assert server.web is not None
        url = server.web.url.rstrip("/")
        print(f"turnkeeper dev: LangGraph API on {url}", flush=True)
        print(f"turnkeeper dev: console on {url}/console/", flush=True)
        print(
            f"turnkeeper dev: gRPC on {server.address} (TURNKEEPER_ADDRESS={server.address} "
            f"for other turnkeeper commands), data in {settings.turns_path.parent}",
            flush=True,
        )
        # Agents started by hand beside dev find its NATS too (decision 306).
        published = local_services.publish(server.address, nats_url)
        host = GraphHost(config, server.address, nats_url, reload=args.reload)
        hosting = asyncio.create_task(host.run())
        announced = asyncio.create_task(_announced(server, graphs))
        await asyncio.wait({hosting, announced}, return_when=asyncio.FIRST_COMPLETED)
        if announced.done():
            print(f"turnkeeper dev: assistants: {', '.join(graphs)}", flush=True)
            print("turnkeeper dev: ready (Ctrl-C stops it)", flush=True)
        return await hosting
    finally:
        if announced is not None:
            announced.cancel()
        # The supervisor first, so that it does not start the graphs again.
        if hosting is not None and not hosting.done():
            hosting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await hosting
        if host is not None:
            await host.stop()
        local_services.withdraw(published)
        if server is not None:
            await server.stop(DEV_GRACE)
        if embedded is not None:
            embedded.stop()


async def dev(args: argparse.Namespace) -> int:
    config = args.config.resolve()
    try:
        graphs = graph_names(config)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    # Handled from the first moment: a signal during start-up ends it too.
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    work = asyncio.create_task(_serve_and_host(args, config, graphs))
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({work, stopping}, return_when=asyncio.FIRST_COMPLETED)
    if not work.done():
        # Bounded first, then said: once the line is out, a second signal stops it.
        serve_main.bound_shutdown(loop, args.shutdown_timeout)
        log.info(
            "signal received: stopping the graphs, the service and NATS within %g s "
            "(a second signal stops at once)",
            args.shutdown_timeout,
        )
        work.cancel()
    else:
        stopping.cancel()
    try:
        return await work
    except asyncio.CancelledError:
        return 0
    except (InsecureListen, ValueError, StoreInUse, Unavailable, RuntimeError) as exc:
        log.error("%s", exc)
        return 2


def run(args: argparse.Namespace) -> NoReturn:
    logs.configure(args.log_level, "text")
    log.debug("grpc I/O engine: %s", io_engine.describe())
    code = asyncio.run(dev(args))
    # Everything has stopped. The interpreter's finalization would wait seconds for
    # grpc core to wind down connection attempts (to a NATS or service that does not
    # answer): the process ends here instead, its output flushed.
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> NoReturn:
    parser = argparse.ArgumentParser(prog="turnkeeper dev", description=HELP)
    add_arguments(parser)
    run(parser.parse_args(argv))
