"""Counting invariant checks and keeping the violations, with what a person needs
to look into one."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass
class Checks:
    """Every invariant the campaign checks goes through :meth:`expect`."""

    count: int = 0
    violations: list[str] = field(default_factory=list)

    def expect(self, ok: bool, violation: str) -> bool:
        """Count one check; keep ``violation`` when it failed. Returns ``ok``."""
        self.count += 1
        if not ok:
            self.violations.append(violation)
        return ok

    def summary(self, limit: int = 40) -> str:
        shown = "\n".join(f"  - {v}" for v in self.violations[:limit])
        more = len(self.violations) - limit
        return shown + (f"\n  ... and {more} more" if more > 0 else "")


def covered_by_rewind(rewinds: list[tuple[int, int]], seq: int, attempt: int) -> bool:
    """May an event (``seq``, written by ``attempt``) be gone? Only if a re-drive
    to a later attempt rewound the turn to a boundary before it. ``rewinds`` are
    the turn's (seq, attempt) rewinds as published."""
    return any(r_attempt > attempt and r_seq < seq for r_seq, r_attempt in rewinds)


def digest(type_: str, data_json: str) -> str:
    """What an agent's ``ackev`` record line says about an event's content."""
    return hashlib.sha1(f"{type_}\0{data_json}".encode()).hexdigest()[:16]
