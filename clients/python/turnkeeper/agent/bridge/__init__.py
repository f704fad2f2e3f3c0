"""The NATS bridge: hosts a LangGraph graph in an agent process and runs its turns
durably through the turnkeeper service (docs/architecture.md §4-§6).

::

    from turnkeeper.agent.bridge import Bridge, BridgeConfig

    await Bridge(builder, BridgeConfig.from_env("my-agent")).run()   # until SIGTERM

JSON-RPC methods
================

Requests are JSON-RPC 2.0 in vystak's envelope ``{jsonrpc, id, method, params,
metadata}``, sent as NATS requests to ``<prefix>.<ns>.agents.<agent>.tasks``
(prefix ``vystak`` and ns ``default`` by default); the bridge subscribes in queue
group ``agents.<agent>``, so each request reaches one replica. Every request gets
an answer ``{jsonrpc: "2.0", id, result}`` or ``{jsonrpc: "2.0", id, error}``;
none is held up by a running turn. These methods and their fields are stable:

``responses/create`` ``{input, thread_id?, turn_id?, regenerate?, background: true}``
    Journals a detached turn (StartTurn, before answering) and starts it.
    ``input`` is any JSON value (the graph gets it through the bridge's
    ``input_mapper``) except an object with a top-level ``"__turnkeeper__"`` key
    (reserved, see below); ``turn_id`` is the idempotency key, and ``turn_id`` and
    ``thread_id`` are generated when absent. Result: ``{turn_id, thread_id,
    status}``, status ``"in_progress"`` (``"completed"`` or ``"failed"`` when the
    same request is sent again after the turn ended). Follow the turn with
    TurnStatus and WatchTurn on the service, or on NATS
    ``<prefix>.turn.events.<turn_id>``. ``background`` must be ``true``.

    Without new input (``thread_id`` required):

    - ``input: null`` continues the thread: when its latest checkpoint has work
      pending (a turn that failed or was cut short), a new turn runs it from that
      checkpoint (``astream(None)``, the input_mapper not called); when nothing is
      pending the answer is ``{turn_id: null, thread_id, status: "completed"}``
      and no turn is started (unless ``turn_id`` names a turn that already ran:
      the same request again, answered for that turn).
    - ``regenerate: true`` (with ``input: null``) answers the thread's latest
      input again: a new turn repositions the thread to the entry node of its
      latest run (:mod:`turnkeeper.agent._reposition`: the checkpoint right after that
      run's input) and runs from there; the old answer stays in the history, off
      the thread's line. A thread with no run to go back to gets ``-32000`` with
      ``FAILED_PRECONDITION``.

    The intent is journaled as the turn's input, so a turn that dies before its
    first checkpoint is re-driven with it: ``null`` for a continuation,
    ``{"__turnkeeper__": "regenerate"}`` for a regenerate (the entry checkpoint is
    looked up again when the turn starts over; :mod:`turnkeeper.agent.bridge._intent`).
    A thread with a RUNNING or PARKED turn refuses either (``FAILED_PRECONDITION``,
    from the service).

    Optional lifecycle fields: ``multitask_strategy`` (``reject``, the default;
    ``enqueue``: the turn waits, status ``"queued"``, and starts when the turns
    before it end; ``interrupt`` and ``rollback``: the live turn is cancelled, its
    checkpoints kept or removed, and the result names it in ``cancelled_turn_id``),
    and ``max_run_time`` / ``park_expiry`` in seconds (the turn's deadlines; unset:
    the service's defaults).

    ``run`` (the LangGraph API's run options, journaled with the input so every
    execution runs the same way; :class:`~turnkeeper.agent.bridge._intent.RunIntent`):
    ``{command?: {resume?, update?, goto?}, checkpoint_id?, interrupt_before?,
    interrupt_after?, config?, context?}``; a run stopped by a static interrupt
    parks. ``config`` (``configurable``, ``tags``, ``metadata``, ``recursion_limit``,
    ``run_name``) and ``context`` (LangGraph's runtime context, the keys its
    ``context_schema`` names) reach the graph in every execution of the turn.

``responses/turnStatus`` ``{turn_id}``
    Result: ``{turn_id, status, state, attempts, last_seq, error}``, asked of the
    service. ``status`` is the contract's word, one a panel that knows only
    ``running``, ``parked``, ``done``, ``failed``, ``unknown`` reads right: a queued
    turn is ``running`` (it will run), a cancelled one ``cancelled`` (which concludes
    such a panel); ``state`` is the exact word (``queued`` too); plus
    ``end_reason`` (``cancelled``, ``max_run_time``, ``park_expired``) when the service
    ended it. (gRPC's TurnStatus keeps the upper-case enum names.)

``responses/cancel`` ``{turn_id, rollback?, reason?}``
    Cancels a running, parked or queued turn through the service's CancelTurn (the
    replica running it stops its graph). Result: ``{turn_id, status: "cancelled",
    last_seq, checkpoints_removed}``; a turn already over gets ``-32000`` with
    ``FAILED_PRECONDITION``.

``responses/resumeDetached`` ``{turn_id, resume}``
    Resumes a PARKED turn with ``resume`` (any JSON, ``null`` included: the value
    ``interrupt()`` returns in the graph) through the service's ResumeDetached.
    Result: ``{turn_id, status, state, dispatched}`` (words as above); ``dispatched`` false means no
    replica took the turn yet; it runs when one does.

``langgraph/describe``, ``langgraph/state``, ``langgraph/history``, ``langgraph/updateState``
    The graph's description and a thread's state, history and edits, for the
    service's LangGraph API (:mod:`turnkeeper.agent.bridge._graph_api`).

``turnkeeper/execute`` ``{turn_id, attempt, reason}``
    Internal: how the service hands a replica a turn (``reason`` ``resume``,
    ``redrive``, ``lease-expired``). Answered ``{accepted: true}`` on receipt
    (``false`` while the bridge shuts down); the replica then claims the turn
    (ClaimTurn) and runs it, or, with every slot taken (``max_turns``), claims it
    when one frees (:mod:`turnkeeper.agent.bridge._admission`).

``turnkeeper/alive`` ``{incarnation, turns: {turn_id: attempt}}``
    Internal, on the agent's control subject (every replica hears it): asked by the
    service before it re-drives turns whose leases lapsed. The replica of that
    incarnation answers ``{running: [turn_id ...]}``, the turns it still executes at
    that attempt (or holds, waiting for a slot); the others do not answer at all.
    The named turns keep their owner with a fresh lease (decision 382).

``turnkeeper/ping`` ``{}``
    Answered ``{}`` by whichever replica gets it. A bridge sends it to its own
    subject after subscribing (and after every NATS reconnect): its answer proves
    the server routes the subject to the new subscription, and only then is the
    bridge ready (``GET /healthz`` 200; see :mod:`turnkeeper.agent.bridge._subscriber`).

Errors: ``-32700`` not JSON, ``-32600`` not a request, ``-32601`` unknown method,
``-32602`` bad params, ``-32603`` internal error, ``-32000`` the service refused
or failed the call, with ``data: {code, message}`` (the gRPC status name, e.g.
``FAILED_PRECONDITION``, and the service's message).

Other params are ignored, so adding one breaks no caller.

What a turn promises
====================

- Events (:mod:`turnkeeper.agent.bridge._events`) are numbered contiguously per turn and
  appended before the checkpoint that ends their step, so a re-drive rewinds to an
  exact boundary: a watcher sees the events of completed steps once, then the
  re-run step's events again after a reset, never a duplicate or a gap.
- Steps are at-least-once: the step running when an execution dies runs again
  (``durability="sync"``: only that step), all of its nodes, including parallel
  ones that had already finished (their events were rewound away with the
  others'; see :mod:`turnkeeper.agent.bridge._boundary`). Tools that must act once use
  :func:`idempotency_key` (``turn_id:step:attempt``).
- A node calling ``interrupt(value)`` parks the turn (an ``interrupt`` event, no
  terminal event); the resume re-runs that node from its start, as LangGraph does,
  so events it emitted before ``interrupt()`` appear again: call ``interrupt()``
  before streaming anything in that node.
- A turn orphaned more than the service's re-drive cap (3) ends FAILED with a
  synthetic ``turn.failed``; the bridge never runs it again.
"""

from turnkeeper.agent.bridge._boundary import BoundarySaver
from turnkeeper.agent.bridge._bridge import Bridge
from turnkeeper.agent.bridge._config import BridgeConfig
from turnkeeper.agent.bridge._idempotency import idempotency_key

__all__ = ["BoundarySaver", "Bridge", "BridgeConfig", "idempotency_key"]
