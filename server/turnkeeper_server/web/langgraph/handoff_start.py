"""A run started in one message (decision 370): the service journals its turn and
hands it to a replica of its graph, instead of asking the agent to start it.

Through the relay, a run crossed service -> agent (``responses/create`` over NATS)
-> service (StartTurn over gRPC) -> agent -> service before its graph began. Here
the service makes StartTurn's transition itself (journal/start.py, through the
operation gRPC's StartTurn uses, operations/start.py: the same multitask strategies,
the same rights and audit record for what a run does to its thread, naming the
caller), and the turn, RUNNING and owned by nobody, goes to a live replica as a
hand-off (engine/handoffs.py), which claims it and drives it as it drives a resumed
or re-driven turn. So a hand-off that is lost, or a replica killed between the
commit and its claim, leaves a turn like any unclaimed one: the lease reaper offers
it again each claim window, and a replica of the graph that starts takes it in its
startup Redrive. A replica that says it takes hand-offs with their claim
(decision 590) is named in the start's commit instead: the turn is its own for a
claim window, the hand-off goes to it alone with what ClaimTurn would answer, and it
runs the turn without asking; a hand-off it does not take is offered again with
nothing spent (journal/containment.py). A run of a graph no replica serves now is journaled the same way
and waits, ``pending``, until one comes.

What only the agent can answer still goes through the relay (:func:`needs_agent`
says which): a run with input null and no Command or checkpoint continues the
thread only if its latest checkpoint has work pending, which the graph decides.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from turnkeeper._run_request import INTENT_KEY, journaled_run, parse_run_options
from turnkeeper.v1 import turns_pb2

from turnkeeper_server import limits as lim
from turnkeeper_server.journal.runs import RunRecord
from turnkeeper_server.journal.start import NewThread, Started, StartRequest
from turnkeeper_server.operations.convert import turn_to_proto
from turnkeeper_server.operations.origin import Origin
from turnkeeper_server.operations.start import start_turn
from turnkeeper_server.records import RUNNING, TurnRecord
from turnkeeper_server.security import auth
from turnkeeper_server.security.auth import Caller
from turnkeeper_server.web import auth as web_auth
from turnkeeper_server.web.langgraph.api import Deps
from turnkeeper_server.web.relay import check_call

# The hand-off's reason, in the engine's log line and the bridge's.
REASON = "create"


def needs_agent(payload: Any, options: dict[str, Any]) -> bool:
    """Whether only the agent can start the run (through the relay): input null
    without a Command or a checkpoint to run from (whether the thread has anything
    to continue is its graph's to say), or an input that carries the journal's
    reserved key (the bridge refuses it in its own words)."""
    if payload is None and not (options.get("command") or options.get("checkpoint_id")):
        return True
    return isinstance(payload, dict) and INTENT_KEY in payload


def journaled(payload: Any, options: dict[str, Any]) -> Any:
    """The run's input as its turn journals it, as the bridge's ``responses/create``
    journals it (turnkeeper._run_request.journaled_run): `options` as the bridge's
    ``run`` param holds them."""
    return journaled_run(payload, parse_run_options(options, payload)) if options else payload


async def start(
    deps: Deps,
    caller: Caller | None,
    origin: Origin,
    *,
    agent: str,
    thread_id: str,
    run_id: str,
    strategy: str,
    journaled_input: Any,
    new_thread: dict[str, Any] | None = None,
    run: RunRecord | None = None,
) -> TurnRecord:
    """Journal the run's turn for `caller` and hand it to a replica of `agent`; the
    turn as journaled (RUNNING and owned by nobody, or QUEUED behind the thread's
    live turn). Errors are the service's (WrongState for a busy thread under
    `reject`, PermissionDenied ...), as StartTurn's through the relay were.
    `new_thread`: the metadata of the thread the run makes, made in the turn's
    commit (decision 580; ThreadMadeMeanwhile when a racing request made it).
    `run`: the run's record, written in the turn's commit (decision 700)."""
    # The right to start a turn of the agent: responses/create's, as the relay checks.
    check_call(caller, agent, auth.JSONRPC_CREATE)
    limits = deps.operations.turns.limits
    input_json = json.dumps(journaled_input, allow_nan=False)
    lim.check_size("input", len(input_json.encode()), limits.max_input_bytes)
    # The replica the start claims the turn for (decision 590), if one takes that.
    claimer = deps.engine.turns.versions.claimer(agent)
    with web_auth.acting_as(caller):
        # An agent token starts turns only on threads no other agent's turn holds.
        auth.require_thread(
            thread_id, lambda: deps.engine.turns.thread_agents(thread_id), starting=True
        )
        started = await start_turn(
            deps.operations.turns,
            StartRequest(
                turn_id=run_id,
                thread_id=thread_id,
                agent=agent,
                input_json=input_json,
                strategy=strategy,
                thread_owner=auth.identity(caller),
                new_thread=None if new_thread is None else NewThread(new_thread),
                replica=claimer.replica if claimer else "",
                incarnation=claimer.incarnation if claimer else "",
                graph_fingerprint=claimer.fingerprint if claimer else "",
                graph_label=claimer.label if claimer else "",
                handed=claimer is not None,
                run=run,
            ),
            origin,
        )
    turn = started.turn
    if started.created and turn.state == RUNNING and turn.handed:
        deps.engine.turns.hand_with_claim_later(turn, claim_of(started), reason=REASON)
    elif started.created and turn.state == RUNNING and not turn.owned:
        # After the commit, in the background: the run's answer does not wait for a
        # replica. Not taken (none live, the message lost), the turn waits for the
        # reaper's next claim window or a replica's startup Redrive.
        deps.engine.turns.handoffs.dispatch_later(turn, reason=REASON)
    return turn


def claim_of(started: Started) -> str:
    """What ClaimTurn would have answered for a turn its start claimed (a
    ClaimTurnResponse, base64): the hand-off carries it to the owner."""
    response = turns_pb2.ClaimTurnResponse(
        turn=turn_to_proto(started.turn),
        checkpoint_id=started.checkpoint_id,
        thread_empty=started.thread_empty,
    )
    return base64.b64encode(response.SerializeToString()).decode()
