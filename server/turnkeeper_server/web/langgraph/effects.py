"""A run's effects (docs/effects.md), a turnkeeper addition to LangGraph's API:
``GET /threads/{thread_id}/runs/{run_id}/effects`` answers the run's effect ledger,
the calls its tools made that act on the world, in the order they were first
recorded: what ``ListEffects`` answers over gRPC, in the API's JSON (snake_case,
arguments and outcomes as JSON values, times as ISO 8601)."""

from __future__ import annotations

import json
from typing import Any, Final

from aiohttp import web

from turnkeeper_server.records import EffectRecord
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web.langgraph.api import (
    Deps,
    json_response,
    require,
    run_or_404,
    thread_id_of,
)
from turnkeeper_server.web.langgraph.shapes import iso

# The rights table's entry: whoever may call ListEffects over gRPC.
RIGHT: Final = "/turnkeeper.v1.TurnService/ListEffects"
# A turn's effects are read in pages of this many.
PAGE: Final = 1000


def effect(row: EffectRecord) -> dict[str, Any]:
    return {
        "key": row.effect_key,
        "name": row.name,
        "args": json.loads(row.args_json or "null"),
        "policy": row.policy,
        "state": row.state,
        "outcome": json.loads(row.outcome_json) if row.outcome_json else None,
        "attempt": row.attempt,
        "task_id": row.task_id,
        "checkpoint_id": row.checkpoint_id,
        "call_index": row.call_index,
        "detail": row.detail,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


async def list_(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, RIGHT)
    turn = run_or_404(deps, caller, thread_id_of(request), request.match_info["run_id"])
    rows: list[EffectRecord] = []
    while True:
        page = await deps.engine.effects.list(turn.turn_id, len(rows), PAGE)
        rows += page
        if len(page) < PAGE:
            break
    return json_response({"run_id": turn.turn_id, "effects": [effect(r) for r in rows]})
