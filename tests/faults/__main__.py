"""``python -m tests.faults [--full] [--overload] [--backend sqlite|postgres] [--seed N]``

Without ``--full``: the CI-sized campaign (what ``pytest tests/faults`` runs).
With ``--full``: at least 200 agent SIGKILLs; writes docs/reliability.md (SQLite), or
its "On PostgreSQL" section (``--backend postgres``: two service replicas on one
database, replica SIGKILLs and PostgreSQL restarts). Each keeps the other's part.
With ``--overload``: the campaign's turns without faults, first on a quiet machine and
then with CPU hogs at twice the core count (OVERLOAD, or OVERLOAD_FULL with
``--full``); writes the "Under overload" section of docs/reliability.md (p99 run time
quiet and oversubscribed, their ratio, every re-drive with its cause). Exits 1 if any
invariant was violated (or, under overload, a turn failed or was re-driven).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from tests.faults.campaign import (
    CI,
    FULL,
    OVERLOAD,
    OVERLOAD_FULL,
    Campaign,
    Result,
    machine,
    report,
    run_section,
)

REPO = Path(__file__).resolve().parents[2]


POSTGRES_SECTION = "\n## On PostgreSQL\n"
OVERLOAD_SECTION = "\n## Under overload\n"


def p99(seconds: list[float]) -> float:
    ordered = sorted(seconds)
    return ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0


def overload_section(quiet: Result, loaded: Result, command: str) -> str:
    """The quiet and the oversubscribed run side by side."""
    q, o = quiet.turn_seconds, loaded.turn_seconds
    ratio = p99(o) / p99(q) if p99(q) else 0.0
    median = (statistics.median(q) if q else 0.0, statistics.median(o) if o else 0.0)
    lines = [
        "",
        "The campaign's turns with no fault injected, first without hogs, then with",
        f"{loaded.plan.hogs_per_core}x as many CPU hogs as cores spinning from the first round to",
        "the last (tests/faults/overload.py). No agent dies, so every re-drive would be a live",
        "agent's turn declared dead. `pytest tests/faults/test_overload.py` runs a reduced one;",
        "`python -m bench --only overload` measures the same figures on turns of its own",
        "([benchmarks-overload.md](benchmarks-overload.md)).",
        f"Run on {time.strftime('%Y-%m-%d')}, {machine()}, a machine other work shared",
        "(both runs alike): the ratio is what the hogs added.",
        "",
        "```",
        command,
        "```",
        "",
        "| figure | quiet | oversubscribed | ratio |",
        "|---|---|---|---|",
        f"| turns | {quiet.turns} | {loaded.turns} | |",
        f"| turn run time, median | {median[0]:.1f} s | {median[1]:.1f} s | "
        f"{median[1] / median[0] if median[0] else 0:.2f}x |",
        f"| turn run time, p99 | {p99(q):.1f} s | {p99(o):.1f} s | **{ratio:.2f}x** |",
        f"| turns FAILED | {quiet.tally.failed_at_cap} | {loaded.tally.failed_at_cap} | |",
        f"| turns re-driven | {len(quiet.redrives)} | {len(loaded.redrives)} | |",
        f"| violations | {len(quiet.violations)} | {len(loaded.violations)} | |",
    ]
    redrives = quiet.redrives + loaded.redrives
    if redrives:
        lines += ["", "Re-drives and their causes:", "", "```"]
        lines += [r.describe() for r in redrives]
        lines += ["```"]
    return "\n".join(lines) + "\n"


def write_overload(target: Path, section: str) -> None:
    """The page with its "Under overload" section, always the last, replaced."""
    existing = target.read_text() if target.exists() else ""
    head = existing.partition(OVERLOAD_SECTION)[0]
    target.write_text(head.rstrip("\n") + "\n" + OVERLOAD_SECTION + section)


def run_overload(args: argparse.Namespace, seed: int, workdir: Path) -> int:
    plan = OVERLOAD_FULL if args.full else OVERLOAD
    quiet_plan = dataclasses.replace(plan, name=f"{plan.name}-quiet", hogs_per_core=0)
    quiet = asyncio.run(Campaign(quiet_plan, seed, workdir / "quiet").run())
    loaded = asyncio.run(Campaign(plan, seed, workdir / "loaded").run())
    command = f"python -m tests.faults --overload {'--full ' if args.full else ''}--seed {seed}"
    section = overload_section(quiet, loaded, command)
    print(section)
    target = args.report or REPO / "docs" / "reliability.md"
    write_overload(target, section)
    print(f"report written to {target}")
    bad = loaded.violations or loaded.redrives or loaded.tally.failed_at_cap
    return 1 if bad or quiet.violations else 0


def write_report(target: Path, text: str, backend: str) -> None:
    """The SQLite report is the page (`report`); the PostgreSQL run is its last
    section (`run_section`: how it was run, its table). Either run keeps the other's
    part of the page, and the overload section stays last."""
    existing = target.read_text() if target.exists() else ""
    existing, _, overload = existing.partition(OVERLOAD_SECTION)
    page, _, section = existing.partition(POSTGRES_SECTION)
    if backend == "sqlite":
        page = text
    else:
        section = (
            "\nThe same campaign with the service on PostgreSQL: two replicas on one "
            "database, the clients and agents given both addresses; the service SIGKILL "
            "strikes one replica, and a PostgreSQL restart (fast shutdown, then start) "
            "takes the full disk's place.\n\n" + text
        )
    text = (
        page.rstrip("\n")
        + "\n"
        + (POSTGRES_SECTION + section.rstrip("\n") + "\n" if section else "")
    )
    target.write_text(text + (OVERLOAD_SECTION + overload if overload else ""))


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    parser.add_argument("--full", action="store_true", help="the full run (>= 200 agent kills)")
    parser.add_argument("--seed", type=int, default=None, help="default: a random one")
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="where to write the report (--full: docs/reliability.md by default)",
    )
    parser.add_argument("--workdir", type=Path, default=None, help="keep data and logs here")
    parser.add_argument(
        "--overload",
        action="store_true",
        help="no faults: quiet, then with CPU hogs at 2x the cores (the overload section)",
    )
    parser.add_argument(
        "--backend", choices=("sqlite", "postgres"), default="sqlite", help="the service's store"
    )
    args = parser.parse_args()
    plan = FULL if args.full else CI
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="turnkeeper-faults-"))
    print(f"seed {seed}; data and logs in {workdir}", flush=True)
    if args.overload:
        return run_overload(args, seed, workdir)
    result = asyncio.run(Campaign(plan, seed, workdir, args.backend).run())
    target = args.report or (REPO / "docs" / "reliability.md" if args.full else None)
    if target is not None:
        backend = "" if args.backend == "sqlite" else f"--backend {args.backend} "
        command = f"python -m tests.faults {'--full ' if args.full else ''}{backend}--seed {seed}"
        made = report if args.backend == "sqlite" else run_section
        write_report(target, made(result, command), args.backend)
        print(f"report written to {target}")
    if result.violations:
        print(f"{len(result.violations)} violations:\n{result.checks.summary()}")
        return 1
    print(f"no violations in {result.checks.count} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
