"""Starting a turn, one operation for both surfaces: gRPC's StartTurn (a bridge's,
acting for its caller) and the LangGraph API's runs, which the service journals
itself and hands to a replica in one message (decision 370).

A start that cancels or rewrites another turn's work (the `interrupt` and `rollback`
strategies, a regenerate) or edits the thread's state (a run's Command with
`update` or `goto`, a fork, an answer to an interrupt) needs a right of its own on
the thread, held by the caller and by whom a bridge acts for; it is audited under
them, its refusal too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from turnkeeper import _multitask as multitask

from turnkeeper_server import audit as audit_log
from turnkeeper_server.journal.start import Started, StartRequest
from turnkeeper_server.operations.origin import Origin
from turnkeeper_server.operations.turns import TurnOperations
from turnkeeper_server.security import auth


async def start_turn(
    operations: TurnOperations, request: StartRequest, origin: Origin | None
) -> Started:
    """Journal the turn (journal/start.py): with the rights and the audit record of
    what it does to the thread, when it does more than start a turn."""
    disruptive = disruption(request.strategy, request.input_json)
    if disruptive is None:
        return await operations.engine.turns.start(request)
    # What it does to the thread's live (or last) turn is a cancel's, an edit of its
    # state or an answer to its interrupt: the caller, and whom a bridge acts for,
    # need that right.
    thread_id = request.thread_id
    async with audit_log.audited(operations.audit, disruptive.action, thread_id, origin):
        for right in disruptive.rights:
            if request.new_thread is None:
                operations.require_on_thread(right, thread_id, disruptive.what)
            else:
                # A thread this start makes (decision 580) is not in the journal yet:
                # its owner is whom it is made for.
                auth.require_on_behalf(
                    right,
                    disruptive.what,
                    request.thread_owner,
                    owners_edit_state=operations.owners_edit_state,
                )
        return await operations.engine.turns.start(request)


_TURNS_RPC = "/turnkeeper.v1.TurnService/"
_CANCEL_RIGHT = _TURNS_RPC + "CancelTurn"
# The journaled input of a regenerate (turnkeeper.agent.bridge._intent): the thread
# goes back to the entry of its last run, whose answer is replaced.
_REGENERATE_INPUT = {"__turnkeeper__": "regenerate"}


@dataclass(frozen=True)
class Disruption:
    """What a StartTurn does to another turn's work or to the thread's state: the
    audit action, the rights it needs (RIGHTS keys), and the words of a refusal."""

    action: str
    rights: tuple[str, ...]
    what: str


def disruption(strategy: str, input_json: str) -> Disruption | None:
    """What a StartTurn that cancels or rewrites another turn's work, or edits the
    thread's state, needs; None for one that does neither."""
    if strategy == multitask.INTERRUPT:
        return Disruption(
            audit_log.START_INTERRUPT,
            (_CANCEL_RIGHT,),
            "start a turn that interrupts the thread's live turn",
        )
    if strategy == multitask.ROLLBACK:
        return Disruption(
            audit_log.START_ROLLBACK,
            (_CANCEL_RIGHT,),
            "start a turn that cancels the thread's live turn and removes its checkpoints",
        )
    if '"__turnkeeper__"' not in input_json:
        return None
    journaled = json.loads(input_json)
    if journaled == _REGENERATE_INPUT:
        return Disruption(
            audit_log.REGENERATE,
            (_CANCEL_RIGHT,),
            "regenerate the thread's last answer (it is replaced)",
        )
    if not isinstance(journaled, dict) or journaled.get("__turnkeeper__") != "run":
        return None
    # A LangGraph API run's options (turnkeeper.agent.bridge._intent.RunIntent).
    command = journaled.get("command")
    command = command if isinstance(command, dict) else {}
    if command.keys() & {"update", "goto"}:
        rights = (auth.EDIT_STATE,) + ((auth.ANSWER_INTERRUPT,) if "resume" in command else ())
        return Disruption(
            audit_log.EDIT_STATE, rights, "run a Command that edits the thread's state"
        )
    if journaled.get("checkpoint_id") is not None:
        return Disruption(
            audit_log.FORK, (auth.EDIT_STATE,), "run the thread from an earlier checkpoint"
        )
    if "resume" in command:
        return Disruption(
            audit_log.RESUME, (auth.ANSWER_INTERRUPT,), "answer the thread's interrupt"
        )
    return None
