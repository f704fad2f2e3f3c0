"""The 4-step durable turn as a DBOS workflow on SQLite, in a process of its own
(DBOS is one global instance per process).

    python -m bench.dbos_turn --data-dir DIR --single N --concurrent M --callers C

prints one JSON object: {"single_s": median seconds per turn, "concurrent_tps": turns/s}.
Each step receives the ~2 KB state and returns it with its name appended, so DBOS
checkpoints the state after every step, as the LangGraph turn does.
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

from bench import turns


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--single", type=int, required=True)
    parser.add_argument("--concurrent", type=int, required=True)
    parser.add_argument("--callers", type=int, required=True)
    args = parser.parse_args()

    from dbos import DBOS, DBOSConfig, SetWorkflowID

    config: DBOSConfig = {
        "name": "turnkeeper-bench",
        "system_database_url": f"sqlite:///{args.data_dir / 'dbos.sqlite'}",
        "enable_otlp": False,
        "console_log_level": "WARNING",
        "max_executor_threads": max(64, args.callers * 2),
    }
    DBOS(config=config)

    # Registered by calling the decorators (not `@` syntax), so this type-checks
    # without the bench extra installed too.
    def make_step(name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            return {"payload": state["payload"], "steps": [*state["steps"], name]}

        return DBOS.step(name=f"step-{name}")(run)

    steps = [make_step(name) for name in turns.STEPS]

    def workflow(state: dict[str, Any]) -> dict[str, Any]:
        for s in steps:
            state = s(state)
        return state

    turn_workflow = DBOS.workflow(name="turn")(workflow)

    DBOS.launch()
    try:

        def turn() -> None:
            with SetWorkflowID(f"bench-{uuid.uuid4().hex}"):
                result = turn_workflow({"payload": turns.PAYLOAD, "steps": []})
            if result["steps"] != list(turns.STEPS):
                raise RuntimeError(f"the workflow ran {result['steps']}")

        single = turns.single(turn, args.single)
        concurrent = turns.concurrent(turn, args.concurrent, args.callers)
    finally:
        DBOS.destroy()
    json.dump({"single_s": single, "concurrent_tps": concurrent}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
