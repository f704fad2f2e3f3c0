"""Serve every graph of a ``langgraph.json`` under its own bridge, in one process,
until SIGTERM or SIGINT; a LangGraph.js graph under the TypeScript runner, in a
Node.js process of its own that this one starts and stops (``host._node``)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn

from turnkeeper.agent.bridge import Bridge, BridgeConfig
from turnkeeper.agent.bridge._admission import DEFAULT_MAX_TURNS
from turnkeeper.agent.host._config import HostConfig, read_config
from turnkeeper.agent.host._loader import load_graph
from turnkeeper.agent.host._node import NodeGraph, node_graphs
from turnkeeper.agent.saver import SHARE_ENV

log = logging.getLogger(__name__)


def prepare(config: HostConfig) -> None:
    """The file's environment (variables already set win) and local dependencies."""
    for key, value in config.env.items():
        os.environ.setdefault(key, value)
    for directory in reversed(config.dependencies):
        if str(directory) not in sys.path:
            sys.path.insert(0, str(directory))


def bridge_configs(
    config: HostConfig, env: Mapping[str, str], **overrides: Any
) -> list[BridgeConfig]:
    """One bridge per graph, named after it, streaming ``values`` for the LangGraph
    API, their runs on one checkpoint stream unless TURNKEEPER_SAVER_SHARE_STREAM says
    otherwise (:func:`share_stream`). With several graphs, only the first serves /healthz where
    TURNKEEPER_HEALTH_LISTEN says; the others pick free ports (logged). A graph's
    token is ``TURNKEEPER_TOKEN_<GRAPH>`` when set, else ``TURNKEEPER_TOKEN``."""
    out = []
    share = share_stream(env)
    for k, spec in enumerate(config.graphs):
        extra: dict[str, Any] = {"langgraph_api": True, "share_stream": share, **overrides}
        if spec.version_label:
            extra["version_label"] = spec.version_label
        if k > 0:
            host = BridgeConfig.from_env(spec.name, env).health_address[0]
            extra["health_listen"] = f"{host}:0"
        out.append(BridgeConfig.from_env(spec.name, graph_env(env, spec.name), **extra))
    return out


def share_stream(env: Mapping[str, str]) -> bool:
    """Whether the host's runs share one checkpoint stream per event loop: yes unless
    ``TURNKEEPER_SAVER_SHARE_STREAM`` is ``0`` (decision 600; RemoteSaver's own default,
    outside the host, stays a stream per run). Any other value is refused."""
    raw = env.get(SHARE_ENV, "").strip().lower()
    if raw in ("", "1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(
        f"{SHARE_ENV}={env[SHARE_ENV]!r}: 1 (the host's runs on one checkpoint stream, "
        "the default) or 0 (a stream per run)"
    )


def token_variable(graph: str) -> str:
    """``TURNKEEPER_TOKEN_<GRAPH>``: the agent token of one graph (an agent token
    is for one agent, and each graph is its own agent)."""
    return "TURNKEEPER_TOKEN_" + graph.upper().replace("-", "_")


def graph_env(env: Mapping[str, str], graph: str) -> Mapping[str, str]:
    """The bridge's variables for `graph`: its own token where one is set."""
    own = env.get(token_variable(graph))
    return {**env, "TURNKEEPER_TOKEN": own} if own else env


async def host(
    path: Path | str,
    env: Mapping[str, str] | None = None,
    *,
    freeze_gc: bool = False,
    **overrides: Any,
) -> None:
    """Load and serve the graphs of `path` until SIGTERM or SIGINT (or until a
    bridge closes for good), then shut every bridge down. ``freeze_gc``: once the
    bridges have started, what loading made is frozen out of the cyclic garbage
    collector (:func:`freeze_startup`; the CLI's, not a caller's process)."""
    config = read_config(path)
    prepare(config)
    env = os.environ if env is None else env
    bridges: list[Bridge | NodeGraph] = []
    configs = bridge_configs(config, env, **overrides)
    paired = list(zip(config.graphs, configs, strict=True))
    # LangGraph.js graphs: each in a Node.js runner of its own (host._node).
    runners = node_graphs(config, [(s, c) for s, c in paired if s.is_node], env)
    for spec, bridge_config in paired:
        if spec.is_node:
            continue
        try:
            graph = await load_graph(spec)
        except ValueError:
            raise
        except Exception as exc:
            # The graph's own code failed (a syntax error, an import, the factory):
            # its traceback, then the host's usage error (exit 2), not a crash.
            log.exception("graph %s: loading %s failed", spec.name, spec.module)
            raise ValueError(f"graph {spec.name!r} could not be loaded: {exc!r}") from None
        bridges.append(Bridge(graph, bridge_config))
        log.info("graph %s loaded from %s:%s", spec.name, spec.module, spec.attribute)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    handled: list[signal.Signals] = []
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
            handled.append(sig)
    # A bridge's start returns once the service and NATS answer, which may be never:
    # the signal is awaited beside it, from the first moment, not after it.
    bridges += runners
    starting = asyncio.ensure_future(asyncio.gather(*(b.start() for b in bridges)))
    waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
    waits += [asyncio.ensure_future(b.wait_closed()) for b in bridges]
    try:
        await asyncio.wait([starting, *waits], return_when=asyncio.FIRST_COMPLETED)
        started_well = starting.done() and starting.exception() is None
        if started_well and not any(w.done() for w in waits):
            if freeze_gc:
                freeze_startup()
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()
        if not starting.done():
            # Shutting the bridges down ends their starts (each returns when stopped).
            starting.cancel()
        for sig in handled:
            loop.remove_signal_handler(sig)
        log.info("shutting down %d graph(s)", len(bridges))
        await asyncio.gather(
            *(
                b.shutdown(grace=configs[0].shutdown_grace + 5)
                if isinstance(b, NodeGraph)
                else b.shutdown()
                for b in bridges
            ),
            return_exceptions=True,
        )
        (started,) = await asyncio.gather(starting, return_exceptions=True)
    if isinstance(started, Exception):
        # A start that failed (a /healthz port in use ...) closes its bridge first:
        # the host ends with the start's error either way.
        raise started


#: ``0`` leaves what the host's startup made to the cyclic collector (for measuring).
GC_FREEZE_VARIABLE = "TURNKEEPER_GC_FREEZE"


def freeze_startup() -> int:
    """Move every object alive now (the graphs, LangChain's and LangGraph's modules,
    grpc's and protobuf's) out of the cyclic garbage collector's reach, as the
    service does (decision 156): a run's garbage sets off full collections, which
    then walk only what runs made (decision 520). Returns how many were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("%d objects from startup frozen out of the cyclic garbage collector", frozen)
    return frozen


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(
        prog="turnkeeper agent",
        description="Serve the graphs of a langgraph.json durably (docs/langgraph-api.md). "
        "The service, NATS and the token are the bridge's TURNKEEPER_* variables.",
    )
    parser.add_argument("config", help="the langgraph.json")
    parser.add_argument(
        "--max-turns",
        type=int,
        default=None,
        metavar="N",
        help="turns each graph's bridge executes at once; past it a run waits, shown "
        "pending, until a slot frees (env TURNKEEPER_MAX_TURNS; default "
        f"{DEFAULT_MAX_TURNS}; 0: no limit)",
    )
    args = parser.parse_args(argv)
    if args.max_turns is not None:
        if args.max_turns < 0:
            parser.error(f"--max-turns {args.max_turns}: 0 (no limit) or more")
        # The flag wins over the variable; the bridges read it (BridgeConfig.from_env).
        os.environ["TURNKEEPER_MAX_TURNS"] = str(args.max_turns)
    die_with(os.environ.get(PARENT_VARIABLE))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        freeze = os.environ.get(GC_FREEZE_VARIABLE, "1") != "0"
        asyncio.run(host(args.config, freeze_gc=freeze))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    exit_now(0)


#: Set by `turnkeeper dev` to its pid: the host ends when dev does, even by SIGKILL.
PARENT_VARIABLE = "TURNKEEPER_DIE_WITH_PARENT"


def die_with(parent: str | None) -> None:
    """Linux: have the kernel send this process SIGTERM when `parent` (a pid) dies;
    gone already: exit. Set here, after exec, rather than by the parent between fork
    and exec, where a process running gRPC's threads should run no Python."""
    if not parent or not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != int(parent):
        sys.exit(0)


def exit_now(code: int) -> NoReturn:
    """End the process once the bridges have stopped. The interpreter's own
    finalization would wait for grpc core to wind down a connection attempt to a
    service that does not answer, seconds after a SIGTERM: nothing is left to do,
    so the process ends here, its output flushed."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
