"""``python -m tests.faults [--full] [--backend sqlite|postgres] [--seed N] [--report PATH]``

Without ``--full``: the CI-sized campaign (what ``pytest tests/faults`` runs).
With ``--full``: at least 200 agent SIGKILLs; writes docs/reliability.md (SQLite), or
its "On PostgreSQL" section (``--backend postgres``: two service replicas on one
database, replica SIGKILLs and PostgreSQL restarts). Each keeps the other's part.
Exits 1 if any invariant was violated.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

from tests.faults.campaign import CI, FULL, Campaign, report

REPO = Path(__file__).resolve().parents[2]


POSTGRES_SECTION = "\n## On PostgreSQL\n"


def write_report(target: Path, text: str, backend: str) -> None:
    """The SQLite report is the page; the PostgreSQL one its last section (its
    table and how it was run). Either run keeps the other's part of the page."""
    existing = target.read_text() if target.exists() else ""
    page, _, section = existing.partition(POSTGRES_SECTION)
    if backend == "sqlite":
        page = text.rstrip("\n") + "\n"
    else:
        body = text.split("\n", 1)[1].split("\n## Found by the campaign", 1)[0]
        section = (
            "\nThe same campaign with the service on PostgreSQL: two replicas on one "
            "database, the clients and agents given both addresses; the service SIGKILL "
            "strikes one replica, and a PostgreSQL restart (fast shutdown, then start) "
            "takes the full disk's place.\n" + body.rstrip("\n") + "\n"
        )
    target.write_text(page.rstrip("\n") + "\n" + (POSTGRES_SECTION + section if section else ""))


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
        "--backend", choices=("sqlite", "postgres"), default="sqlite", help="the service's store"
    )
    args = parser.parse_args()
    plan = FULL if args.full else CI
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="turnkeeper-faults-"))
    print(f"seed {seed}; data and logs in {workdir}", flush=True)
    result = asyncio.run(Campaign(plan, seed, workdir, args.backend).run())
    target = args.report or (REPO / "docs" / "reliability.md" if args.full else None)
    if target is not None:
        backend = "" if args.backend == "sqlite" else f"--backend {args.backend} "
        command = f"python -m tests.faults {'--full ' if args.full else ''}{backend}--seed {seed}"
        write_report(target, report(result, command), args.backend)
        print(f"report written to {target}")
    if result.violations:
        print(f"{len(result.violations)} violations:\n{result.checks.summary()}")
        return 1
    print(f"no violations in {result.checks.count} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
