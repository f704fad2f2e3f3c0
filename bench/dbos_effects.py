"""What one `@DBOS.step` costs over a plain call, in a process of its own (DBOS is
one global instance per process), on its SQLite system database.

    python -m bench.dbos_effects --data-dir DIR --calls N --rounds R

prints one JSON object: {"plain_s", "step_s"}: the median seconds per call of a
workflow making N plain calls, and of one making N `@DBOS.step` calls (each step's
result made durable before the next).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import median


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--calls", type=int, required=True)
    parser.add_argument("--rounds", type=int, required=True)
    args = parser.parse_args()

    from dbos import DBOS, DBOSConfig, SetWorkflowID

    config: DBOSConfig = {
        "name": "turnkeeper-bench-effects",
        "system_database_url": f"sqlite:///{args.data_dir / 'dbos-effects.sqlite'}",
        "enable_otlp": False,
        "console_log_level": "WARNING",
    }
    DBOS(config=config)

    def act(i: int) -> dict[str, Any]:
        return {"i": i}

    # Registered by calling the decorators (not `@` syntax), so this type-checks
    # without the bench extra installed too.
    step = DBOS.step(name="act")(act)

    def plain_workflow(n: int) -> float:
        started = time.perf_counter()
        for i in range(n):
            act(i)
        return (time.perf_counter() - started) / n

    def step_workflow(n: int) -> float:
        started = time.perf_counter()
        for i in range(n):
            step(i)
        return (time.perf_counter() - started) / n

    workflows = {
        "plain_s": DBOS.workflow(name="plain")(plain_workflow),
        "step_s": DBOS.workflow(name="steps")(step_workflow),
    }
    DBOS.launch()
    try:
        figures: dict[str, list[float]] = {name: [] for name in workflows}
        for _ in range(args.rounds + 1):  # the first round warms up
            for name, workflow in workflows.items():
                with SetWorkflowID(f"bench-{uuid.uuid4().hex}"):
                    figures[name].append(workflow(args.calls))
    finally:
        DBOS.destroy()
    json.dump({name: median(values[1:]) for name, values in figures.items()}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
