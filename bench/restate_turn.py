"""The 4-step durable turn as a Restate service (Python SDK), served by hypercorn.

    python -m bench.restate_turn --port PORT

serves the `Turn` service (and bench/restate_effects.py's `Effects`) on
127.0.0.1:PORT until killed. Each step is a
`ctx.run_typed` action over the ~2 KB state, so Restate journals the state after
every step, as the LangGraph turn checkpoints it.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

import restate
from hypercorn.asyncio import serve
from hypercorn.config import Config

from bench import restate_effects, turns

service = restate.Service("Turn")


def _step(name: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"payload": state["payload"], "steps": [*state["steps"], name]}


async def run(ctx: restate.Context, state: dict[str, Any]) -> dict[str, Any]:
    for name in turns.STEPS:
        state = await ctx.run_typed(f"step-{name}", _step, restate.RunOptions(), name, state)
    return state


# Registered by a call (not `@` syntax), so this type-checks without the bench extra.
service.handler()(run)


# The Effects service (bench/restate_effects.py) rides on the same deployment.
app = restate.app(services=[service, restate_effects.service])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    config = Config()
    config.bind = [f"127.0.0.1:{args.port}"]
    config.loglevel = "WARNING"
    config.accesslog = None
    asyncio.run(serve(app, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
