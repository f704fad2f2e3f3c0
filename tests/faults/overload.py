"""The machine oversubscribed on purpose: CPU hogs for the whole length of a campaign,
and an account of every re-drive (a turn whose agent never died must have none).

A hog is a process that spins on the CPU at the same priority as everything else,
so ``per_core`` hogs a core give the campaign's processes (the service, NATS, the
agents, the harness) about ``1 / (per_core + 1)`` of the machine, in bursts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

SPIN = "while True:\n    pass\n"


class CpuHogs:
    """``per_core`` spinning processes per core, until the context ends."""

    def __init__(self, per_core: int) -> None:
        self.count = per_core * (os.cpu_count() or 1)
        self.procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Self:
        for _ in range(self.count):
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", SPIN],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
        for proc in self.procs:
            proc.wait()
        self.procs.clear()


@dataclass
class Redrive:
    """A turn run more than once, and what the logs say of why."""

    turn_id: str
    attempts: int
    causes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        said = "; ".join(self.causes) or "no log line names a cause"
        return f"{self.turn_id}: {self.attempts} re-drive(s): {said}"


# What the service and the agents log when a turn is taken from an executor.
CAUSE_MARKS = (
    "re-driven (",
    "orphaned (",
    "the lease lapsed",
    "leaving the turn for a re-drive",
    "refused: the turn was re-driven away",
    "still running at shutdown",
)


def causes(turn_id: str, lines: list[str]) -> list[str]:
    """The log lines about `turn_id` that say why it was re-driven."""
    mark = f"turn_id={turn_id} "
    return [
        line.strip()[-240:]
        for line in lines
        if mark in line and any(cause in line for cause in CAUSE_MARKS)
    ]
