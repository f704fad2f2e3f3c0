"""A run's webhook on the LangGraph API: checked when the run is created, its body
when it is delivered, and its deliveries read back.

- `check`: a run's ``webhook`` is refused with 422 when the service has no secret
  to sign it with, or its URL is one no webhook may have, or its host resolves to an
  address the operator has not allowed (webhooks/addresses.py): what is knowable at
  creation is said then. The delivery checks again (the DNS may say otherwise
  later) and records a refusal.
- `payload`: the body, as LangGraph's server sends it: the run (its status as it
  ended), ``run_started_at``, ``run_ended_at``, ``webhook_sent_at``, the thread's
  ``values`` after the run, and ``error`` for a run that failed.
- ``GET /threads/{thread_id}/runs/{run_id}/webhook`` (a turnkeeper addition, for the
  console): the delivery's state and every attempt at it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

from aiohttp import web

from turnkeeper_server.journal import webhooks as rows
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web.langgraph import shapes
from turnkeeper_server.web.langgraph.api import (
    Deps,
    json_response,
    require,
    run_or_404,
    thread_id_of,
)
from turnkeeper_server.web.langgraph.errors import ApiError
from turnkeeper_server.web.langgraph.stream import Translator
from turnkeeper_server.webhooks.addresses import AddressPolicy, Refused
from turnkeeper_server.webhooks.delivery import Payload

# Who reads a run's deliveries: whoever may read its effect ledger (operators,
# admins, the run's own agent).
RIGHT: Final = "/turnkeeper.v1.TurnService/ListEffects"
# How many of a run's events are read at once to build its body.
EVENTS_PAGE: Final = 1000


async def check(deps: Deps, url: Any) -> None:
    """Refuse a run body's (or a cron's) webhook URL unless it may be delivered."""
    if url in (None, ""):
        return
    if not isinstance(url, str):
        raise ApiError(422, "webhook: must be a URL (a string)")
    if deps.webhooks.secret_file is None:
        raise ApiError(
            422,
            "webhook: this service has no webhook signing secret; its operator sets "
            "--webhook-secret-file (docs/operators.md)",
        )
    policy = AddressPolicy.parse(deps.webhooks.allow)
    try:
        await policy.resolve(policy.target(url))
    except Refused as exc:
        raise ApiError(422, str(exc)) from None
    except LookupError as exc:
        raise ApiError(422, f"{exc}; check the webhook URL") from None


def payload(deps: Deps) -> Payload:
    async def build(run_id: str, run_state: str) -> dict[str, Any] | None:
        turn = deps.engine.turns.get(run_id)
        if turn is None:
            return None
        record = (await deps.engine.threads.runs([run_id])).get(run_id)
        translator = Translator(run_id, frozenset({"values"}))
        translator.start_from(await deps.engine.threads.values_before(turn))
        after = 0
        while events := deps.engine.turns.events(run_id, after, EVENTS_PAGE):
            for event in events:
                translator.parts(event)
            after = events[-1].seq
        delivery = await deps.engine.threads.webhook(run_id)
        ended = delivery[0].ended_at if delivery[0] is not None else None
        body: dict[str, Any] = {
            **shapes.run(turn, record, status=shapes.RUN_STATUS.get(run_state or turn.state)),
            "run_started_at": shapes.iso(turn.created_at),
            "run_ended_at": shapes.iso(ended) if ended else shapes.iso(turn.updated_at),
            "webhook_sent_at": datetime.now(UTC).isoformat(),
            "values": translator.values,
        }
        if translator.error is not None:
            body["error"] = translator.error
        elif run_state == "FAILED" and turn.error:
            body["error"] = {"error": "RunFailed", "message": turn.error}
        return body

    return build


def _delivery(found: rows.Delivery) -> dict[str, Any]:
    return {
        "url": found.url,
        "state": found.state,
        "run_status": shapes.RUN_STATUS.get(found.run_state) if found.run_state else None,
        "attempts": found.attempts,
        "next_attempt_at": shapes.iso(found.next_attempt_at) if found.next_attempt_at else None,
        "last_error": found.last_error,
        "created_at": shapes.iso(found.created_at),
        "ended_at": shapes.iso(found.ended_at) if found.ended_at else None,
    }


def _attempt(found: rows.Attempt) -> dict[str, Any]:
    return {
        "attempt": found.attempt,
        "replica": found.replica,
        "started_at": shapes.iso(found.started_at),
        "finished_at": shapes.iso(found.finished_at) if found.finished_at else None,
        "outcome": found.outcome or "in flight",
        "http_status": found.http_status,
        "detail": found.detail,
    }


async def get_(request: web.Request, caller: Caller | None, deps: Deps) -> web.StreamResponse:
    require(caller, RIGHT)
    turn = run_or_404(deps, caller, thread_id_of(request), request.match_info["run_id"])
    delivery, attempts = await deps.engine.threads.webhook(turn.turn_id)
    return json_response(
        {
            "run_id": turn.turn_id,
            "webhook": _delivery(delivery) if delivery is not None else None,
            "attempts": [_attempt(a) for a in attempts],
        }
    )
