"""Which of grpc core's two I/O engines a turnkeeper process runs on.

grpcio 1.80 made EventEngine the default I/O engine for Python. On a message-sized
ping-pong over one open stream (what a run's checkpoint stream is), the older
iomgr engine answers in two thirds of the time and with two thirds of the CPU on
the grpcio we pin (bench/analysis.md, "Round six": 315 µs round trip and 185 µs of
the caller's CPU against 210 µs and 130 µs). The cause is one thread hop less per
message: with EventEngine its own threads do the socket I/O and hand each message
to the completion queue's poller thread, which hands it to asyncio.

grpc chooses its engine once, when its extension module is loaded, from the
`GRPC_EXPERIMENTS` variable. So :func:`prefer_iomgr` must run before anything in
the process imports `grpc`: the entry points of the processes turnkeeper owns (the
service, the `turnkeeper` command, the benchmarks) call it first. An agent's
process is its owner's; docs/operators.md says how to give it the same setting.

It changes nothing where `GRPC_EXPERIMENTS` is set already, even to the empty
string (grpc's own defaults: `GRPC_EXPERIMENTS= turnkeeper serve`), or on a grpcio
where this was not measured: grpc plans to remove these experiments, and an
unknown one makes it log an error at start.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, MutableMapping
from importlib import metadata

# The experiments that put grpc's clients and listeners back on iomgr.
IOMGR = "-event_engine_client,-event_engine_listener"
# The grpcio minor versions it was measured on: EventEngine is Python's default
# from 1.80; above the range, measure again before widening it.
MEASURED = ((1, 80), (1, 85))


def _minor(version: str) -> tuple[int, int] | None:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def prefer_iomgr(environ: MutableMapping[str, str] = os.environ, grpcio: str | None = None) -> bool:
    """Ask grpc for iomgr in this process, if nobody chose and grpc is not loaded;
    True if it set `GRPC_EXPERIMENTS`. `grpcio` is the installed version (looked up
    when not given)."""
    if "GRPC_EXPERIMENTS" in environ or "grpc" in sys.modules:
        return False
    if grpcio is None:
        try:
            grpcio = metadata.version("grpcio")
        except metadata.PackageNotFoundError:
            return False
    minor = _minor(grpcio)
    if minor is None or not MEASURED[0] <= minor <= MEASURED[1]:
        return False
    environ["GRPC_EXPERIMENTS"] = IOMGR
    return True


def describe(environ: Mapping[str, str] = os.environ) -> str:
    """Which engine this process asked grpc for, in words for its start-up log."""
    chosen = environ.get("GRPC_EXPERIMENTS")
    if chosen is None:
        return "grpc's default (GRPC_EXPERIMENTS unset)"
    if chosen == IOMGR:
        return f"iomgr (GRPC_EXPERIMENTS={chosen})"
    return f"as GRPC_EXPERIMENTS={chosen!r} says"
