"""``python -m tests.faults [--full] [--seed N] [--report PATH]``

Without ``--full``: the CI-sized campaign (what ``pytest tests/faults`` runs).
With ``--full``: at least 200 agent SIGKILLs; writes docs/reliability.md.
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
    args = parser.parse_args()
    plan = FULL if args.full else CI
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="turnkeeper-faults-"))
    print(f"seed {seed}; data and logs in {workdir}", flush=True)
    result = asyncio.run(Campaign(plan, seed, workdir).run())
    target = args.report or (REPO / "docs" / "reliability.md" if args.full else None)
    if target is not None:
        command = f"python -m tests.faults {'--full ' if args.full else ''}--seed {seed}"
        target.write_text(report(result, command))
        print(f"report written to {target}")
    if result.violations:
        print(f"{len(result.violations)} violations:\n{result.checks.summary()}")
        return 1
    print(f"no violations in {result.checks.count} checks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
