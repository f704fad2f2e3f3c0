"""Running turns: one :class:`Execution` per (turn, attempt), as an asyncio task.

An execution owns its attempt of a turn while it runs: it heartbeats the lease,
drives the graph with ``durability="sync"`` through the :class:`BoundarySaver`,
turns the graph's callbacks into events, and ends the attempt with exactly one
ParkTurn (the graph called ``interrupt()``) or FinishTurn (DONE, or FAILED when the
graph raised). Where it starts from:

- a new turn, or a re-drive of one that wrote no checkpoint: the journaled input,
  read as :mod:`turnkeeper.agent.bridge._intent` says (new input through the
  ``input_mapper``; ``null``: the thread's latest checkpoint; the regenerate marker:
  the entry checkpoint of the thread's latest run, found again on every start);
- a re-drive: the thread's latest checkpoint (``astream(None)``);
- a resume (the turn carries the ResumeDetached value and its checkpoint has a
  pending interrupt): ``Command(resume=value)``.

When a write is refused because the attempt was re-driven away (ABORTED), or the
turn is no longer RUNNING, the execution stops at once and writes nothing more: it
is a zombie, and the service has already handed the turn to someone else. When the
service cannot be reached for longer than the lease, it stops too; the turn is then
re-driven like any orphan. Steps are at-least-once: the step running when an
execution dies runs again in the next attempt, every node of it (see
:func:`turnkeeper.agent.bridge.idempotency_key` and
:mod:`turnkeeper.agent.bridge._boundary`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from langchain_core.runnables import RunnableConfig
from langgraph.pregel import Pregel
from langgraph.types import Command, Interrupt, StreamMode

from turnkeeper._run_request import CONFIG_KEYS, default_assistant_id, own_configurable
from turnkeeper._values import py_to_value, value_to_py
from turnkeeper.agent._reposition import at_checkpoint
from turnkeeper.agent.bridge._admission import DEFAULT_MAX_TURNS, Admission
from turnkeeper.agent.bridge._boundary import BoundarySaver
from turnkeeper.agent.bridge._capture import EventCapture, StreamCapture
from turnkeeper.agent.bridge._convert import response_schema_of, to_jsonable
from turnkeeper.agent.bridge._events import FENCED, EventLog
from turnkeeper.agent.bridge._intent import (
    RunIntent,
    context_for,
    is_regenerate,
    regenerate_point,
    run_intent,
)
from turnkeeper.agent.bridge._lease import LeaseKeeper
from turnkeeper.agent.bridge._models_stream import with_models_streaming
from turnkeeper.agent.effect._snapshot import CONFIG_KEY as EFFECTS_SNAPSHOT_KEY
from turnkeeper.agent.effect._snapshot import LedgerSnapshot
from turnkeeper.agent.saver import durable_config, durable_run_kwargs
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.errors import InvalidArgument, ResourceExhausted, TurnkeeperError
from turnkeeper.v1 import turns_pb2

log = logging.getLogger(__name__)

AnyGraph = Pregel[Any, Any, Any, Any]
InputMapper = Callable[[Any], Any]

# Used when a turn arrives without a lease (it should not): the service's default.
DEFAULT_LEASE_SECONDS: Final = 15.0
MAX_ERROR_CHARS: Final = 8000
_INTERRUPT_KEY: Final = "__interrupt__"


class NothingToRegenerate(RuntimeError):
    """A regenerate turn on a thread with no run to go back to: the turn fails."""


@dataclass(frozen=True)
class Identity:
    """Who executes: the agent, a stable replica name, this process's incarnation."""

    agent: str
    replica: str
    incarnation: str


@dataclass(frozen=True)
class Assignment:
    """A turn handed to this replica, owned by it, to execute now."""

    turn: turns_pb2.Turn
    # The checkpoint to continue from; "" to start from the journaled input.
    checkpoint_id: str
    # "create", "redrive", "resume", "lease-expired" ... for the logs.
    reason: str
    # The claim found the thread without a root checkpoint (ClaimTurnResponse's
    # thread_empty): the graph's first read of its latest is answered "none" here.
    thread_empty: bool = False
    # Handed with its claim (decision 590): no ClaimTurn was made, the turn is ours
    # for a claim window (its lease in `turn`) until a heartbeat gives this lease.
    handed_lease: float = 0.0

    @property
    def turn_id(self) -> str:
        return self.turn.turn_id

    @property
    def attempt(self) -> int:
        return self.turn.attempts


class TurnRuntime:
    """The executions of one bridge, at most one per turn."""

    def __init__(
        self,
        graph: AnyGraph,
        client: AsyncTurnkeeperClient,
        saver: BoundarySaver,
        identity: Identity,
        *,
        input_mapper: InputMapper,
        run_config: Mapping[str, Any] | None = None,
        langgraph_api: bool = False,
        graph_version: turns_pb2.GraphVersion | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        self.graph = graph
        # Sent with ClaimTurn: the agent's version policy decides on it.
        self.graph_version = graph_version
        # Runs get the configurable keys LangGraph's server gives its graphs.
        self.langgraph_api = langgraph_api
        self.client = client
        self.saver = saver
        self.identity = identity
        self.input_mapper = input_mapper
        self.run_config = dict(run_config or {})
        self._executions: dict[str, Execution] = {}
        self._stopping = False
        # Every execution's lease, renewed from a thread of its own (decision 320).
        self.leases = LeaseKeeper(client.options)
        # At most max_turns executions at once; the rest wait, visibly (_admission.py).
        self.admission = Admission(max_turns)
        self.admission.on_claim = self._claim_later
        self._claims: set[asyncio.Task[None]] = set()

    def running(self, turn_id: str) -> Execution | None:
        execution = self._executions.get(turn_id)
        return execution if execution is not None and not execution.done else None

    @property
    def active(self) -> int:
        return sum(1 for e in self._executions.values() if not e.done)

    def start(self, assignment: Assignment, *, slot: bool = False) -> bool:
        """Start executing (once a slot is free; `slot`: the caller took one for it,
        and it is given back however this ends); False if this attempt already runs
        here (the same turn can reach a replica twice: its startup Redrive and a
        hand-off)."""
        if self._stopping:
            log.info("turn_id=%s: not started, the bridge is stopping", assignment.turn_id)
            if slot:
                self.admission.give_back()
            return False
        current = self.running(assignment.turn_id)
        if current is not None:
            if current.attempt >= assignment.attempt:
                if slot:
                    self.admission.give_back()
                return False
            # An older attempt of ours was re-driven (to us again): it is a zombie.
            current.lose(f"superseded by attempt {assignment.attempt}")
        self.admission.forget(assignment.turn_id)
        execution = Execution(self, assignment, slot=slot)
        self._executions[assignment.turn_id] = execution
        execution.task = asyncio.create_task(
            execution.run(), name=f"turn:{assignment.turn_id}:{assignment.attempt}"
        )
        execution.task.add_done_callback(lambda _: self._forget(execution))
        return True

    def _forget(self, execution: Execution) -> None:
        if self._executions.get(execution.turn_id) is execution:
            del self._executions[execution.turn_id]
        if execution.slot:
            # Here, not in run(): a task cancelled before it began runs no finally.
            execution.slot = False
            self.admission.give_back()

    def take(self, assignment: Assignment) -> bool:
        """Run a turn the service claimed for this replica in the commit that started
        it (decision 590): no ClaimTurn; with every slot taken it waits for one
        holding its lease. False when it does not start (stopping, or it runs here)."""
        return self.start(assignment)

    async def claim(self, turn_id: str, attempt: int, reason: str) -> None:
        """Take a turn the service handed out over NATS (a resume, a lease-expiry
        re-drive) and execute it; with every slot taken, claim it when one frees (it
        stays unowned meanwhile, and the service may offer it to another replica).
        Someone else claiming it first is not an error."""
        if not await self._not_running(turn_id, attempt):
            return
        if self._stopping:
            return
        if not self.admission.try_take():
            self.admission.wait_to_claim(turn_id, attempt, reason)
            return
        await self._claim(turn_id, attempt, reason)

    async def _not_running(self, turn_id: str, attempt: int) -> bool:
        """False while this attempt runs here; True once it does not, after waiting
        for an execution of it that is settling to end.

        A park or finish of this very attempt may be under way or just committed
        while its task has not ended: a resume hands the same attempt back
        (ResumeDetached keeps the attempt), possibly before this loop has even read
        ParkTurn's answer. Taken for "runs here already", the hand-off was dropped
        and the turn waited for the reaper's next claim window, claimed then outside
        the hand-off's trace (decision 560)."""
        while (current := self.running(turn_id)) is not None and current.attempt == attempt:
            if not current.settling:
                return False
            await current.ended()
        return True

    def _claim_later(self, turn_id: str, attempt: int, reason: str) -> None:
        """A slot freed for a waiting claim (Admission.on_claim): claim it now."""
        if self._stopping:
            self.admission.give_back()
            return
        task = asyncio.create_task(
            self._claim(turn_id, attempt, f"{reason}, after waiting for a slot"),
            name=f"claim:{turn_id}",
        )
        self._claims.add(task)
        task.add_done_callback(self._claims.discard)

    async def _claim(self, turn_id: str, attempt: int, reason: str) -> None:
        """ClaimTurn and start, holding a slot: once handed to start() the slot is
        its to give back (however that ends), before that it is given back here."""
        handed = False
        try:
            handed = await self._claimed(turn_id, attempt, reason)
        finally:
            if not handed:
                self.admission.give_back()

    async def _claimed(self, turn_id: str, attempt: int, reason: str) -> bool:
        """True once the slot is start()'s, whether it started the turn or not."""
        # A claim that waited for a slot: the same wait as claim()'s (decision 560).
        if not await self._not_running(turn_id, attempt):
            return False
        try:
            response = await self.client.claim_turn(
                turns_pb2.ClaimTurnRequest(
                    turn_id=turn_id,
                    attempt=attempt,
                    replica=self.identity.replica,
                    incarnation=self.identity.incarnation,
                    graph=self.graph_version,
                )
            )
        except FENCED as exc:
            # Also FAILED_PRECONDITION when the agent's version policy keeps the turn
            # for another graph version (docs/versions.md): the service hands it to
            # a replica serving one, and says in the turn's detail which it waits for.
            log.info("turn_id=%s attempt=%d: not claimed (%s)", turn_id, attempt, exc.message)
            return False
        except TurnkeeperError as exc:
            # Unclaimed, the turn is handed out again when its claim window passes.
            log.warning("turn_id=%s attempt=%d: ClaimTurn failed: %s", turn_id, attempt, exc)
            return False
        # start() gives the slot back itself when it does not start (the bridge is
        # stopping, or this attempt runs here already): given back once, not twice.
        assignment = Assignment(
            response.turn, response.checkpoint_id, reason, thread_empty=response.thread_empty
        )
        self.start(assignment, slot=True)
        return True

    def cancel(self, turn_id: str, attempt: int, reason: str) -> bool:
        """The service ended the turn: stop its graph if this replica runs that attempt."""
        execution = self.running(turn_id)
        if execution is None or execution.attempt != attempt:
            return False
        execution.lose(f"the service ended the turn ({reason or 'cancelled'})")
        return True

    async def stop(self, grace: float) -> None:
        """Let executions finish for up to ``grace`` seconds, then cancel the rest.
        A cancelled execution writes nothing more; its turn stays RUNNING and is
        re-driven (by this replica's next start, or by lease expiry elsewhere)."""
        self._stopping = True
        for task in list(self._claims):
            task.cancel()
        await asyncio.gather(*self._claims, return_exceptions=True)
        try:
            await self._stop_executions(grace)
        finally:
            await asyncio.to_thread(self.leases.close)

    async def _stop_executions(self, grace: float) -> None:
        tasks = [e.task for e in self._executions.values() if e.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for execution in list(self._executions.values()):
            if execution.task in pending:
                log.warning(
                    "turn_id=%s attempt=%d: still running at shutdown; left for a re-drive",
                    execution.turn_id,
                    execution.attempt,
                )
                execution.abandon()
        await asyncio.gather(*pending, return_exceptions=True)


class Execution:
    """One attempt of one turn, executed here."""

    def __init__(self, runtime: TurnRuntime, assignment: Assignment, *, slot: bool = False) -> None:
        self.runtime = runtime
        # Whether this execution holds one of the bridge's slots (_admission.py).
        self.slot = slot
        self.assignment = assignment
        self.turn_id = assignment.turn_id
        self.attempt = assignment.attempt
        self.task: asyncio.Task[None] | None = None
        # Why the execution stopped early (lost its turn); None while it is fine.
        self.lost: str | None = None
        self._settling = False
        self._abandoned = False
        self._events: EventLog | None = None
        self._heartbeat_task: asyncio.Task[None] | None = None

    @property
    def done(self) -> bool:
        return self.task is not None and self.task.done()

    @property
    def settling(self) -> bool:
        """Its ParkTurn or FinishTurn is sent (or committed): it runs no more graph."""
        return self._settling

    async def ended(self) -> None:
        """Until its task has ended, however it ends (never raises)."""
        if self.task is not None:
            await asyncio.wait({self.task})

    def _tag(self) -> str:
        return f"turn_id={self.turn_id} attempt={self.attempt}"

    # -- losing the turn ---------------------------------------------------------------

    def lose(self, reason: str) -> None:
        """Stop now and write nothing more: the turn is no longer ours."""
        if self.lost is not None or self._settling:
            return
        self.lost = reason
        log.warning("%s: %s; this execution stops", self._tag(), reason)
        if self._events is not None:
            self._events.discard()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()

    def refused(self, what: str, exc: TurnkeeperError) -> None:
        log.warning("%s: %s refused (%s: %s)", self._tag(), what, exc.code.name, exc.message)
        self.lose(f"{what} was refused: the turn was re-driven away or ended")

    def abandon(self) -> None:
        """Shutdown: cancel without writing anything more."""
        self._abandoned = True
        if self._events is not None:
            self._events.discard()
        if self.task is not None:
            self.task.cancel()

    # -- the run -------------------------------------------------------------------------

    async def run(self) -> None:
        rt = self.runtime
        turn = self.assignment.turn
        events = EventLog(rt.client, self.turn_id, self.attempt, turn.last_seq)
        self._events = events
        rt.saver.attach(
            events,
            thread_empty=self.assignment.thread_empty,
            # No root checkpoint of its own: it starts from its journaled input.
            fresh=not self.assignment.checkpoint_id,
        )
        log.info(
            "%s: executing (%s, from %s)",
            self._tag(),
            self.assignment.reason,
            f"checkpoint {self.assignment.checkpoint_id}"
            if self.assignment.checkpoint_id
            else "the journaled input",
        )
        heartbeat = asyncio.create_task(self._heartbeat(), name=f"heartbeat:{self.turn_id}")
        flusher = asyncio.create_task(
            events.run(lambda exc: self.refused("AppendEvents", exc)),
            name=f"events:{self.turn_id}",
        )
        self._heartbeat_task = heartbeat
        try:
            if not self.slot:
                await self._admitted()
            await self._drive(events)
        except asyncio.CancelledError:
            if self.lost is None and not self._abandoned:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()
        finally:
            for helper in (heartbeat, flusher):
                helper.cancel()
            await asyncio.gather(heartbeat, flusher, return_exceptions=True)
            rt.saver.detach(events)

    async def _admitted(self) -> None:
        """Until a slot is free: the turn is ours (its lease renewed meanwhile), so it
        waits here rather than in the journal."""
        admission = self.runtime.admission
        if not admission.try_take():
            log.info(
                "%s: waits for a free slot (%d running, --max-turns %d)",
                self._tag(),
                admission.in_use,
                admission.limit,
            )
            await admission.take()
        self.slot = True

    def _config(self, events: EventLog) -> RunnableConfig:
        turn = self.assignment.turn
        config = durable_config(turn.thread_id, turn.turn_id, turn.attempts)
        extra = dict(self.runtime.run_config)
        served: dict[str, Any] = {}
        if self.runtime.langgraph_api:
            agent = self.runtime.identity.agent
            served = {
                "run_id": turn.turn_id,
                "graph_id": agent,
                "assistant_id": default_assistant_id(agent),
            }
        # A LangGraph API run's own config (its assistant's merged in), for every
        # execution of the turn: over the bridge's, under the turn's own keys.
        intent = self._intent
        asked = dict((intent.options.config if intent is not None else None) or {})
        for key in CONFIG_KEYS:
            if key != "configurable" and key in asked:
                extra[key] = (
                    {**(extra.get(key) or {}), **asked[key]} if key == "metadata" else asked[key]
                )
        config["configurable"] = {
            **served,
            **(extra.pop("configurable", None) or {}),
            **own_configurable(asked.get("configurable")),
            **config["configurable"],
            # What this run knows of the turn's effect ledger: a `retry` effect with
            # no row under its key runs without a read (decision 260).
            EFFECTS_SNAPSHOT_KEY: LedgerSnapshot(),
        }
        callbacks = list(extra.pop("callbacks", None) or [])
        merged: RunnableConfig = {**extra, **config}  # type: ignore[typeddict-item]
        merged["callbacks"] = [
            *callbacks,
            EventCapture(
                events,
                message_ids=self.runtime.langgraph_api,
                channels=self._update_channels(),
                tokens=self._tokens(),
            ),
        ]
        return merged

    @functools.cached_property
    def _intent(self) -> RunIntent | None:
        """The LangGraph API run the turn's journaled input asks for, if it is one
        (read once: every part of the execution's set-up asks)."""
        return run_intent(value_to_py(self.assignment.turn.input))

    def _tokens(self) -> bool:
        """Whether the run's models stream and their tokens are journaled: not for a
        LangGraph API run that asked for no ``messages`` mode (decision 770)."""
        intent = self._intent
        return intent is None or intent.options.tokens is not False

    async def _start_point(self, config: RunnableConfig) -> tuple[Any, RunnableConfig]:
        """The graph's input, and the config to run it with."""
        turn = self.assignment.turn
        if not self.assignment.checkpoint_id:
            journaled = value_to_py(turn.input)
            if is_regenerate(journaled):
                entry = await regenerate_point(self.runtime.graph, config)
                if entry is None:
                    raise NothingToRegenerate(f"thread {turn.thread_id} has no run to regenerate")
                log.info("%s: regenerating from checkpoint %s", self._tag(), entry)
                return None, at_checkpoint(config, entry)
            if (intent := self._intent) is not None:
                return self._run_start(intent, config)
            if journaled is None:
                return None, config  # continue the thread from its latest checkpoint
            return self.runtime.input_mapper(journaled), config
        if turn.has_resume:
            state = await self.runtime.graph.aget_state(config)
            if state.interrupts:
                value = value_to_py(turn.resume)
                if value is None:
                    # LangGraph reads Command(resume=None) as no resume at all; a
                    # map by interrupt id carries None to each pending interrupt().
                    return Command(resume={i.id: None for i in state.interrupts}), config
                return Command(resume=value), config
        return None, config

    def _run_start(self, intent: RunIntent, config: RunnableConfig) -> tuple[Any, RunnableConfig]:
        """A LangGraph API run's start: from its checkpoint (a fork) when it names one,
        with its Command or its input."""
        if intent.options.checkpoint_id:
            config = at_checkpoint(config, intent.options.checkpoint_id)
        if intent.options.command:
            return Command(**intent.options.command), config
        if intent.input is None:
            return None, config
        return self.runtime.input_mapper(intent.input), config

    def _stream_modes(self) -> list[StreamMode]:
        # Not "messages": its parts would be dropped here; the models stream for
        # EventCapture by ModelsStream (decision 680).
        modes: list[StreamMode] = ["values", "updates"]
        # The LangGraph API's `custom` parts: only where a client can ask for them.
        return [*modes, "custom"] if self.runtime.langgraph_api else modes

    def _stream_kwargs(self) -> dict[str, Any]:
        """The run's own astream options (static interrupts, its context), for every
        execution."""
        intent = self._intent
        kwargs = {} if intent is None else intent.stream_kwargs()
        graph = self.runtime.graph
        if "context" in kwargs:
            kwargs["context"] = context_for(graph, kwargs["context"])
        elif self.runtime.langgraph_api and getattr(graph, "context_schema", None) is not None:
            # As LangGraph's server runs a graph: a context of none given is an
            # empty one (a dataclass schema's defaults), never None.
            kwargs["context"] = {}
        return kwargs

    def _update_channels(self) -> list[str] | None:
        """The channels a step's journaled update keeps, for the LangGraph API's
        `updates` (its graph's state keys; None: the node's whole output)."""
        channels = self.runtime.graph.stream_channels_asis
        if not self.runtime.langgraph_api or isinstance(channels, str):
            return None
        return list(channels)

    def _captured(self, config: RunnableConfig, events: EventLog) -> RunnableConfig:
        """``config`` with the run's own stream parts (its ``stream`` option)
        journaled as the graph produces them."""
        intent = self._intent
        if intent is None or not intent.options.stream:
            return config
        capture = StreamCapture(events, intent.options.stream, self.runtime.identity.agent)
        return capture.applied(config)

    async def _drive(self, events: EventLog) -> None:
        graph = self.runtime.graph
        config = self._config(events)
        values: Any = None
        interrupts: list[Interrupt] = []
        try:
            graph_input, config = await self._start_point(config)
            config = self._captured(config, events)
            if self._tokens():
                config = with_models_streaming(config)
            static = self._stream_kwargs()
            # A run that goes on from a checkpoint (input null, a Command) writes no
            # checkpoint before its first step, so the saver journals no state: the
            # stream's first `values` is journaled instead, once, on the turn's first
            # execution (LangGraph's server streams the state a run starts from).
            start_state = (
                self.runtime.langgraph_api
                and events.start_seq == 0
                and (graph_input is None or isinstance(graph_input, Command))
            )
            async for mode, chunk in graph.astream(
                graph_input,
                config,
                stream_mode=self._stream_modes(),
                output_keys=graph.output_channels,
                **static,
                **durable_run_kwargs(),
            ):
                if mode == "values":
                    if start_state and "values" not in events.emitted:
                        state = to_jsonable(chunk, 1, whole=True)
                        events.emit("values", {"values": state}, plain=True)
                    start_state = False
                    values = chunk
                elif mode == "updates" and isinstance(chunk, dict) and _INTERRUPT_KEY in chunk:
                    interrupts.extend(chunk[_INTERRUPT_KEY])
                elif mode == "custom":
                    # What the graph wrote with get_stream_writer(). Read here, after
                    # the fact: it may land after its step's checkpoint, so a crash
                    # right then loses it (never repeats it; docs/langgraph-api.md).
                    events.emit("custom", {"data": to_jsonable(chunk, whole=True)})
            # An input checkpoint put off and not followed by another (a graph
            # whose input ran no step): its answer before the run's end (decision 530).
            await events.settle()
        except asyncio.CancelledError:
            raise
        except FENCED as exc:
            self.refused(f"{exc.rpc or 'a write'}", exc)
            return
        except (InvalidArgument, ResourceExhausted) as exc:
            # Deterministic: a re-drive would hit it again. End the turn instead.
            events.discard()
            await self._finish(
                turns_pb2.OUTCOME_FAILED, f"the service refused a write: {exc}", events=[]
            )
            return
        except TurnkeeperError as exc:
            # The service is unreachable (the client already retried) or failing.
            # Stop without ending the turn: it is re-driven once the lease lapses.
            self.lose(f"a call to the service failed ({exc}); leaving the turn for a re-drive")
            return
        except Exception as exc:
            log.exception("%s: the graph raised", self._tag())
            error = {"type": type(exc).__name__, "message": str(exc)}
            await self._finish(
                turns_pb2.OUTCOME_FAILED,
                f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS],
                events=await events.close(("error", error)),
            )
            return
        if not interrupts and ("interrupt_before" in static or "interrupt_after" in static):
            # Stopped by interrupt_before/after with nodes still to run: the run
            # waits for a person as at an interrupt() (LangGraph's "interrupted").
            state = await graph.aget_state(self._config(events))
            if state.next:
                value = {"when": "static", "next": list(state.next)}
                interrupts = [
                    Interrupt(
                        value=value,
                        id=f"static:{state.config['configurable'].get('checkpoint_id')}",
                    )
                ]
        if interrupts:
            await self._park(events, interrupts)
        else:
            final = await events.close(("final", {"output": values}))
            await self._finish(turns_pb2.OUTCOME_DONE, "", events=final)

    # -- ending the attempt --------------------------------------------------------------

    async def _stop_heartbeat(self) -> None:
        self._settling = True
        if self._heartbeat_task is not None:
            self._heartbeat_task.cancel()
            await asyncio.gather(self._heartbeat_task, return_exceptions=True)

    async def _park(self, events: EventLog, interrupts: list[Interrupt]) -> None:
        described = [
            {"id": i.id, "value": to_jsonable(i.value), "response_schema": response_schema_of(i)}
            for i in interrupts
        ]
        value = described[0]["value"] if len(described) == 1 else described
        await self._stop_heartbeat()
        request = turns_pb2.ParkTurnRequest(
            turn_id=self.turn_id,
            attempt=self.attempt,
            interrupt=py_to_value(value),
            events=await events.close(*(("interrupt", d) for d in described)),
        )
        if await self._settle("ParkTurn", lambda: self.runtime.client.park_turn(request), "PARKED"):
            log.info("%s: parked (waiting for ResumeDetached)", self._tag())

    async def _finish(
        self, outcome: int, error: str, *, events: list[turns_pb2.EventInput]
    ) -> None:
        await self._stop_heartbeat()
        request = turns_pb2.FinishTurnRequest(
            turn_id=self.turn_id,
            attempt=self.attempt,
            outcome=outcome,  # type: ignore[arg-type]
            error=error,
            events=events,
        )
        target = "DONE" if outcome == turns_pb2.OUTCOME_DONE else "FAILED"
        if await self._settle(
            "FinishTurn", lambda: self.runtime.client.finish_turn(request), target
        ):
            log.info("%s: %s%s", self._tag(), target, f" ({error})" if error else "")

    async def _settle(self, rpc: str, call: Callable[[], Awaitable[Any]], target: str) -> bool:
        """Run a park or finish (compare-and-set, so never retried blindly): on a
        transport failure, ask TurnStatus whether it committed before trying again."""
        delay = 0.2
        for _ in range(6):
            try:
                await call()
                return True
            except FENCED as exc:
                self._settling = False
                self.refused(rpc, exc)
                return False
            except InvalidArgument as exc:
                if rpc == "FinishTurn":
                    log.error("%s: %s refused: %s", self._tag(), rpc, exc)
                    return False
                # An interrupt value the service will not store: end the turn.
                failed = turns_pb2.FinishTurnRequest(
                    turn_id=self.turn_id,
                    attempt=self.attempt,
                    outcome=turns_pb2.OUTCOME_FAILED,
                    error=f"{rpc} refused: {exc.message}"[:MAX_ERROR_CHARS],
                )
                return await self._settle(
                    "FinishTurn",
                    functools.partial(self.runtime.client.finish_turn, failed),
                    "FAILED",
                )
            except TurnkeeperError as exc:
                log.warning("%s: %s failed (%s); checking the turn", self._tag(), rpc, exc)
            try:
                status = await self.runtime.client.turn_status(
                    turns_pb2.TurnStatusRequest(turn_id=self.turn_id)
                )
            except TurnkeeperError:
                status = None
            if status is not None:
                state = turns_pb2.TurnState.Name(status.state).removeprefix("TURN_STATE_")
                if status.attempts == self.attempt and state == target:
                    return True
                if status.attempts != self.attempt or state != "RUNNING":
                    log.warning(
                        "%s: the turn moved on (%s, attempt %d)",
                        self._tag(),
                        state,
                        status.attempts,
                    )
                    return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        log.error("%s: %s did not get through; the turn will be re-driven", self._tag(), rpc)
        return False

    # -- the lease ----------------------------------------------------------------------

    def _lease_seconds(self) -> float:
        turn = self.assignment.turn
        if turn.HasField("owner") and turn.owner.HasField("lease_expires_at"):
            # Both times are the service's clock: no skew with ours.
            lease = turn.owner.lease_expires_at.ToNanoseconds() - turn.updated_at.ToNanoseconds()
            if lease > 0:
                return lease / 1e9
        return DEFAULT_LEASE_SECONDS

    async def _heartbeat(self) -> None:
        """Keep the lease while the execution runs: renewed by the bridge's lease
        thread (_lease.py, decision 320), so a node that holds this loop does not
        let it lapse. Ends (cancelled) with the execution."""
        request = turns_pb2.HeartbeatRequest(
            turn_id=self.turn_id,
            attempt=self.attempt,
            replica=self.runtime.identity.replica,
            incarnation=self.runtime.identity.incarnation,
        )
        leases = self.runtime.leases
        handed = self.assignment.handed_lease
        leases.hold(
            request,
            handed or self._lease_seconds(),
            on_refused=lambda exc: self.refused("Heartbeat", exc),
            on_lapsed=self.lose,
            # Handed with its claim: the lease is a claim window's until the first
            # beat, sent within a third of it, not at once: its commit would come
            # just ahead of the first step's frame and hold the first token back.
            first=self._lease_seconds() / 3 if handed else None,
        )
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            leases.release(self.turn_id, self.attempt)
