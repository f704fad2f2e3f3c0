"""The `effect` decorator: exactly-once calls of functions that act on the world.

One call, in order (docs/effects.md):

1. its call site and idempotency key (turnkeeper.agent.effect._key);
2. BeginEffect, one round trip: a recorded outcome is returned (or its error raised
   as EffectFailed) without calling the function; an intent recorded by an earlier
   execution without an outcome is uncertain and goes to the policy; otherwise the
   function runs. A `retry` effect records no intent first (its key makes a repeat
   harmless), so it costs one durable commit: the outcome's. `park` and `fail`
   record the intent first: two.
3. the function, with the key (its `key` parameter, or `effect_key()`);
4. RecordEffect with its result, or its error (then the error is raised as is).

The uncertain policies: `retry` calls again with the same key; `park` calls
LangGraph's interrupt() with a payload naming the effect, and the resume value
answers it, `{"happened": true, "result": ...}` or `{"happened": false}`; `fail`
raises EffectUncertain, which fails the turn with the effect named.

That sequence is written once, for sync and async functions alike: `_steps` yields
each step that does I/O (read the ledger, BeginEffect, the function, RecordEffect)
and the two shells, `_call` and `_acall`, do the steps, blocking or awaited.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import json
from collections.abc import Awaitable, Callable, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal, ParamSpec, TypeVar, cast, overload

from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.errors import GraphBubbleUp
from langgraph.types import interrupt

from turnkeeper.agent.effect._errors import EffectFailed, EffectOutsideRemoteSaver, EffectUncertain
from turnkeeper.agent.effect._key import CallSite, call_site
from turnkeeper.agent.effect._snapshot import CONFIG_KEY as SNAPSHOT_KEY
from turnkeeper.agent.effect._snapshot import LedgerSnapshot, run_answer
from turnkeeper.agent.saver._remote import RemoteSaver
from turnkeeper.v1 import turns_pb2

P = ParamSpec("P")
R = TypeVar("R")
Policy = Literal["retry", "park", "fail"]

_POLICIES: Final = {
    "retry": turns_pb2.EFFECT_POLICY_RETRY,
    "park": turns_pb2.EFFECT_POLICY_PARK,
    "fail": turns_pb2.EFFECT_POLICY_FAIL,
}
# The parameter names through which a function takes its key.
KEY_PARAMETERS: Final = ("key", "idempotency_key")
# The interrupt payload's type, for an operator's tools to recognise it.
UNCERTAIN_INTERRUPT: Final = "turnkeeper.effect.uncertain"

_KEY: contextvars.ContextVar[str | None] = contextvars.ContextVar("effect_key", default=None)


def effect_key() -> str:
    """The idempotency key of the effect call running now, to pass on (for example
    as an ``Idempotency-Key`` header). Raises outside an effect."""
    key = _KEY.get()
    if key is None:
        raise RuntimeError("effect_key() is only known inside a function decorated with @effect")
    return key


@overload
def effect(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def effect(
    *, name: str | None = None, policy: Policy | None = None
) -> Callable[[Callable[P, R]], Callable[P, R]]: ...
def effect(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    policy: Policy | None = None,
) -> Any:
    """Make calls of `fn` exactly-once within a turn: a call whose outcome is recorded
    is never made again, in a re-drive from the same checkpoint or on another
    replica. Works on sync and async functions, inside a node or a tool of a turn
    the bridge runs with RemoteSaver. Outside a turn the function is simply called.

    ``policy`` says what to do with a call an earlier execution began and did not
    finish (its outcome is uncertain): ``"retry"``, ``"park"`` or ``"fail"``. The
    default is ``"retry"`` for a function that takes its key (a ``key`` or
    ``idempotency_key`` parameter: it passes the key on, so the receiver can drop a
    repeat) and ``"park"`` for one that does not (nobody could drop it: a person
    decides). Declare it keyword-only with a default, ``*, key: str = ""``, so
    callers (and type checkers) need not pass it: the effect fills it in.
    Arguments and the result are recorded as JSON.
    """

    def wrap(func: Callable[P, R]) -> Callable[P, R]:
        spec = _Spec.of(func, name, policy)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                return await _acall(spec, cast(Callable[..., Awaitable[Any]], func), args, kwargs)

            return cast(Callable[P, R], run_async)

        @functools.wraps(func)
        def run_sync(*args: P.args, **kwargs: P.kwargs) -> R:
            return cast(R, _call(spec, func, args, kwargs))

        return run_sync

    return wrap if fn is None else wrap(fn)


class _Spec:
    def __init__(self, func: Callable[..., Any], name: str, policy: Policy, key_param: str | None):
        self.func, self.name, self.policy, self.key_param = func, name, policy, key_param
        self.signature = inspect.signature(func)

    @classmethod
    def of(cls, func: Callable[..., Any], name: str | None, policy: Policy | None) -> _Spec:
        parameters = inspect.signature(func).parameters
        key_param = next((p for p in KEY_PARAMETERS if p in parameters), None)
        if policy is None:
            policy = "retry" if key_param is not None else "park"
        if policy not in _POLICIES:
            raise ValueError(f"policy must be 'retry', 'park' or 'fail', not {policy!r}")
        return cls(func, name or func.__qualname__, policy, key_param)

    def args_json(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The call's arguments (its key left out) as canonical JSON; a value JSON
        cannot hold is recorded as its str()."""
        bound = self.signature.bind_partial(*args, **kwargs)
        arguments = {k: v for k, v in bound.arguments.items() if k != self.key_param}
        return json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)

    def kwargs_with_key(self, kwargs: dict[str, Any], key: str) -> dict[str, Any]:
        if self.key_param is None:
            return kwargs
        return {**kwargs, self.key_param: key}


class _Call:
    """One call's requests to the ledger, shared by the sync and the async path."""

    def __init__(
        self, spec: _Spec, site: CallSite, args_json: str, snapshot: LedgerSnapshot | None
    ) -> None:
        self.spec, self.site, self.snapshot = spec, site, snapshot
        self.message = turns_pb2.EffectCall(
            turn_id=site.identity.turn_id,
            attempt=site.identity.attempt,
            key=site.key,
            name=spec.name,
            args_json=args_json,
            policy=_POLICIES[spec.policy],
            task_id=site.task_id,
            checkpoint_id=site.checkpoint_id,
            call_index=site.call_index,
        )
        self.key = site.key

    def begin_request(self) -> turns_pb2.BeginEffectRequest:
        # A retry needs no intent: its key alone makes a repeat harmless.
        return turns_pb2.BeginEffectRequest(
            call=self.message, record_intent=self.spec.policy != "retry"
        )

    def answered(self, answer: turns_pb2.BeginEffectResponse) -> str:
        """Take BeginEffect's answer; returns "recorded", "uncertain" or "run"."""
        self.key = answer.effect.key or self.site.key
        self.site.execution.made.add(self.key)
        if self.snapshot is not None:
            self.snapshot.note(self.key)  # a row under it from now on
        if answer.decision == turns_pb2.EFFECT_DECISION_RECORDED:
            return "recorded"
        if answer.decision == turns_pb2.EFFECT_DECISION_UNCERTAIN:
            return "uncertain"
        return "run"

    def recorded(self, answer: turns_pb2.BeginEffectResponse) -> Any:
        """The recorded outcome: the result, or EffectFailed raised."""
        outcome = json.loads(answer.effect.outcome_json or "null")
        if answer.effect.state == turns_pb2.EFFECT_STATE_FAILED:
            raise EffectFailed(
                self.spec.name, self.key, outcome if isinstance(outcome, dict) else {}
            )
        return outcome

    def uncertain(self) -> tuple[bool, Any]:
        """The policy for an uncertain call: (True, None) to call again, or
        (False, result) when an operator said it happened."""
        if self.spec.policy == "retry":
            return True, None
        args = json.loads(self.message.args_json)
        if self.spec.policy == "fail":
            raise EffectUncertain(self.spec.name, self.key, args)
        answer = interrupt(
            {
                "type": UNCERTAIN_INTERRUPT,
                "effect": self.spec.name,
                "key": self.key,
                "args": args,
                "question": (
                    f"Did effect {self.spec.name!r} happen? Resume with "
                    '{"happened": true, "result": ...} or {"happened": false}.'
                ),
            }
        )
        if isinstance(answer, dict) and answer.get("happened") is True:
            return False, answer.get("result")
        if isinstance(answer, dict) and answer.get("happened") is False:
            return True, None
        raise ValueError(
            f"the answer for uncertain effect {self.spec.name!r} (key {self.key}) must be "
            '{"happened": true, "result": ...} or {"happened": false}, not '
            f"{answer!r}"
        )

    def record_request(
        self, state: turns_pb2.EffectState.ValueType, outcome: Any
    ) -> turns_pb2.RecordEffectRequest:
        return turns_pb2.RecordEffectRequest(
            call=self.message, key=self.key, state=state, outcome_json=json.dumps(outcome)
        )

    def result_request(self, result: Any) -> turns_pb2.RecordEffectRequest:
        try:
            return self.record_request(turns_pb2.EFFECT_STATE_DONE, result)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"effect {self.spec.name!r} returned {type(result).__name__}, which JSON "
                f"cannot record ({exc}); return a JSON value (its outcome is recorded as "
                "an error instead)"
            ) from exc

    def error_request(self, exc: BaseException) -> turns_pb2.RecordEffectRequest:
        error = {"type": type(exc).__name__, "message": str(exc)}
        return self.record_request(turns_pb2.EFFECT_STATE_FAILED, error)


def _prepare(
    spec: _Spec, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[_Call, RemoteSaver] | None:
    try:
        config: RunnableConfig = get_config()
    except RuntimeError:
        return None  # not inside a LangGraph run: nothing to make exactly-once
    site = call_site(config, spec.name)
    if site is None:
        return None
    if not isinstance(site.checkpointer, RemoteSaver):
        raise EffectOutsideRemoteSaver(
            f"effect {spec.name!r} runs in turn {site.identity.turn_id!r} but the graph's "
            f"checkpointer is {type(site.checkpointer).__name__}, not RemoteSaver: the "
            "effect ledger is the turnkeeper service's"
        )
    snapshot = (config.get("configurable") or {}).get(SNAPSHOT_KEY)
    if not isinstance(snapshot, LedgerSnapshot) or spec.policy != "retry":
        snapshot = None  # only a retry's BeginEffect is a read the snapshot can answer
    return _Call(spec, site, spec.args_json(args, kwargs), snapshot), site.checkpointer


def _known_run(call: _Call) -> turns_pb2.BeginEffectResponse | None:
    """RUN without asking, when the run's snapshot of the ledger has no row under the
    call's key (turnkeeper.agent.effect._snapshot); None: ask the service."""
    if call.snapshot is not None and call.snapshot.unknown(call.message.key):
        return run_answer(call.message)
    return None


@dataclass(frozen=True, slots=True)
class _LoadLedger:
    """Read the turn's ledger into the run's snapshot (once per run)."""

    saver: RemoteSaver
    snapshot: LedgerSnapshot
    turn_id: str


@dataclass(frozen=True, slots=True)
class _Begin:
    saver: RemoteSaver
    request: turns_pb2.BeginEffectRequest


@dataclass(frozen=True, slots=True)
class _Record:
    saver: RemoteSaver
    request: turns_pb2.RecordEffectRequest


@dataclass(frozen=True, slots=True)
class _Invoke:
    """Call the function with these keyword arguments; `key` (None outside a turn) is
    what effect_key() answers meanwhile."""

    key: str | None
    kwargs: dict[str, Any]


# What the call's core asks its shell to do: each step is one of its I/O lines.
_Step = _LoadLedger | _Begin | _Record | _Invoke


def _steps(
    spec: _Spec, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Generator[_Step, Any, Any]:
    """One effect call's sequence, the same for sync and async functions: it yields
    each step that does I/O, is sent the step's result or thrown its error, and
    returns the call's result. The shells (_call, _acall) differ only in how they do
    a step: blocking, or awaited."""
    prepared = _prepare(spec, args, kwargs)
    if prepared is None:
        return (yield _Invoke(None, kwargs))
    call, saver = prepared
    if call.snapshot is not None and not call.snapshot.loaded:
        yield _LoadLedger(saver, call.snapshot, call.message.turn_id)
    answer = _known_run(call) or (yield _Begin(saver, call.begin_request()))
    decision = call.answered(answer)
    if decision == "recorded":
        return call.recorded(answer)
    if decision == "uncertain":
        again, result = call.uncertain()
        if not again:
            yield _Record(saver, call.record_request(turns_pb2.EFFECT_STATE_RESOLVED, result))
            return result
    try:
        result = yield _Invoke(call.key, spec.kwargs_with_key(kwargs, call.key))
    except GraphBubbleUp:
        raise  # an interrupt inside the function: not an outcome
    except Exception as exc:
        yield _Record(saver, call.error_request(exc))
        raise
    try:
        request = call.result_request(result)
    except TypeError as exc:
        yield _Record(saver, call.error_request(exc))
        raise
    yield _Record(saver, request)
    return result


class _Steps:
    """A shell's side of _steps: iterate for the next step; do it inside `answer()`,
    giving its result to `done` (an error it raises goes to the core); `result` once
    the steps have ended."""

    def __init__(self, spec: _Spec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._core = _steps(spec, args, kwargs)
        self._reply: Any = None
        self._error: BaseException | None = None
        self.result: Any = None

    def __iter__(self) -> Iterator[_Step]:
        while True:
            reply, error = self._reply, self._error
            self._reply, self._error = None, None
            try:
                step = self._core.send(reply) if error is None else self._core.throw(error)
            except StopIteration as end:
                self.result = end.value
                return
            yield step

    @contextlib.contextmanager
    def answer(self) -> Iterator[None]:
        try:
            yield
        except BaseException as exc:  # every outcome is the core's to handle
            self._error = exc

    def done(self, reply: Any) -> None:
        self._reply = reply


@contextlib.contextmanager
def _keyed(key: str | None) -> Iterator[None]:
    """effect_key() answers `key` inside (outside a turn, nothing is set)."""
    if key is None:
        yield
        return
    token = _KEY.set(key)
    try:
        yield
    finally:
        _KEY.reset(token)


def _call(
    spec: _Spec, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    steps = _Steps(spec, args, kwargs)
    for step in steps:
        with steps.answer():
            match step:
                case _LoadLedger(saver, snapshot, turn_id):
                    snapshot.load(saver.list_effects(turn_id))
                case _Begin(saver, request):
                    steps.done(saver.begin_effect(request))
                case _Record(saver, request):
                    saver.record_effect(request)
                case _Invoke(key, keyed):
                    with _keyed(key):
                        steps.done(func(*args, **keyed))
    return steps.result


async def _acall(
    spec: _Spec, func: Callable[..., Awaitable[Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    steps = _Steps(spec, args, kwargs)
    for step in steps:
        with steps.answer():
            match step:
                case _LoadLedger(saver, snapshot, turn_id):
                    # Concurrent effects of one run read the ledger once.
                    async with snapshot.loading():
                        if not snapshot.loaded:
                            snapshot.load(await saver.alist_effects(turn_id))
                case _Begin(saver, request):
                    steps.done(await saver.abegin_effect(request))
                case _Record(saver, request):
                    await saver.arecord_effect(request)
                case _Invoke(key, keyed):
                    with _keyed(key):
                        steps.done(await func(*args, **keyed))
    return steps.result
