"""What one Restate `ctx.run` costs over a plain call: the `Effects` service, served
with the `Turn` service by bench/restate_turn.py. Each handler makes N calls and
answers the seconds per call it measured inside the handler: `plain` calls a
function, `run` wraps each call in `ctx.run_typed` (its result journaled and
acknowledged by the restate-server before the next)."""

from __future__ import annotations

import time
from typing import Any

import restate

service = restate.Service("Effects")


def _act(i: int) -> dict[str, Any]:
    return {"i": i}


async def plain(ctx: restate.Context, calls: int) -> float:
    started = time.perf_counter()
    for i in range(calls):
        _act(i)
    return (time.perf_counter() - started) / calls


async def run(ctx: restate.Context, calls: int) -> float:
    started = time.perf_counter()
    for i in range(calls):
        await ctx.run_typed(f"act-{i}", _act, restate.RunOptions(), i)
    return (time.perf_counter() - started) / calls


# Registered by calls (not `@` syntax), so this type-checks without the bench extra.
service.handler()(plain)
service.handler()(run)
