"""A LangGraph API run request, parsed: pure functions, one set of rules for the two
places that read one.

- the service's HTTP door reads the body of ``runs.create``, ``runs.stream`` and
  ``runs.wait`` (:func:`parse_run_request`) and hands the agent its options as
  ``responses/create``'s ``run`` param;
- the bridge reads that ``run`` param (:func:`parse_run_options`), from the service or
  from any caller on NATS, and journals the options with the input, so every
  execution of the turn runs the same way.

The options are a ``Command`` (resume, update, goto) instead of input, a checkpoint
to start from (a fork), and static interrupts. A wrong request raises ValueError
saying what is wrong, in the words of the request it came in (``run.checkpoint_id``
on the bridge, ``checkpoint_id`` over HTTP); each door answers it as its own
invalid-request error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from turnkeeper import _multitask as multitask

#: The option names, as journaled and as the bridge's ``run`` param holds them.
OPTION_NAMES: Final = ("command", "checkpoint_id", "interrupt_before", "interrupt_after")
COMMAND_KEYS: Final = ("resume", "update", "goto")
# What a run does when its thread does not exist, and when its streaming client goes
# away; the default first.
IF_NOT_EXISTS: Final = ("reject", "create")
ON_DISCONNECT: Final = ("continue", "cancel")


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What a run asks for beside its input; None: not asked."""

    command: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    # "*" (every node) or node names.
    interrupt_before: list[str] | str | None = None
    interrupt_after: list[str] | str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The options asked for, by name: the bridge's ``run`` param, and what the
        journal keeps beside the input."""
        return {name: value for name in OPTION_NAMES if (value := getattr(self, name)) is not None}


@dataclass(frozen=True, slots=True)
class RunRequest:
    """The body of a LangGraph API run, parsed."""

    input: Any = None
    # As given; every run, a resume too, is a new run on its thread.
    command: dict[str, Any] | None = None
    # What the agent journals with the input.
    options: RunOptions = field(default_factory=RunOptions)
    # LangGraph's server's default for a run: enqueue (the bridge's own default,
    # for a responses/create that names none, stays reject).
    multitask_strategy: str = multitask.ENQUEUE
    if_not_exists: str = IF_NOT_EXISTS[0]
    on_disconnect: str = ON_DISCONNECT[0]


def parse_run_request(body: Mapping[str, Any]) -> RunRequest:
    """The body of ``runs.create``, ``runs.stream`` or ``runs.wait``; the fields this
    module does not know (``assistant_id``, ``stream_mode``, ``metadata`` …) are the
    caller's to read."""
    payload = body.get("input")
    command = _command(body.get("command"), payload, where="")
    checkpoint = body.get("checkpoint")
    checkpoint_id = body.get("checkpoint_id") or (
        checkpoint.get("checkpoint_id") if isinstance(checkpoint, Mapping) else None
    )
    options = _options(
        command,
        checkpoint_id,
        body.get("interrupt_before"),
        body.get("interrupt_after"),
        where="",
    )
    return RunRequest(
        input=payload,
        command=command,
        options=options,
        multitask_strategy=multitask.parse(body.get("multitask_strategy") or multitask.ENQUEUE),
        if_not_exists=_one_of("if_not_exists", body.get("if_not_exists"), IF_NOT_EXISTS),
        on_disconnect=_one_of("on_disconnect", body.get("on_disconnect"), ON_DISCONNECT),
    )


def parse_run_options(value: Any, payload: Any) -> RunOptions:
    """``responses/create``'s ``run`` param, beside its ``input`` (``payload``)."""
    if not isinstance(value, Mapping):
        raise ValueError("run must be an object")
    unknown = sorted(set(value) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"run: unknown option(s) {', '.join(unknown)}")
    return _options(
        _command(value.get("command"), payload, where="run."),
        value.get("checkpoint_id"),
        value.get("interrupt_before"),
        value.get("interrupt_after"),
        where="run.",
    )


def _command(value: Any, payload: Any, *, where: str) -> dict[str, Any] | None:
    """A Command's fields as given; an empty one is none. ``where``: how the request
    names the field's parent (``run.``, or nothing at its top level)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}command must be an object of resume, update and goto")
    # RemoteGraph sends the whole Command as a dict: its `graph` is null for the
    # graph the run is on (the only one a run's Command can address).
    if value.get("graph") is not None:
        raise ValueError(f"{where}command.graph must be null: a run's Command is for its own graph")
    value = {k: v for k, v in value.items() if k != "graph"}
    unknown = sorted(set(value) - set(COMMAND_KEYS))
    if unknown:
        raise ValueError(f"{where}command takes resume, update and goto, not {', '.join(unknown)}")
    if not value:
        return None
    if payload is not None:
        raise ValueError(f"send input or {where or 'a '}command, not both")
    return dict(value)


def _options(
    command: dict[str, Any] | None,
    checkpoint_id: Any,
    interrupt_before: Any,
    interrupt_after: Any,
    *,
    where: str,
) -> RunOptions:
    if checkpoint_id is not None and (not isinstance(checkpoint_id, str) or not checkpoint_id):
        raise ValueError(f"{where}checkpoint_id must be a non-empty string")
    for name, value in (
        ("interrupt_before", interrupt_before),
        ("interrupt_after", interrupt_after),
    ):
        if value is None or value == "*":
            continue
        if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
            raise ValueError(f"{where}{name} must be '*' or a list of node names")
    # None fields are LangGraph's defaults: left out, and a command of none is none.
    # So is an empty goto (RemoteGraph sends `goto: []` with every resume): a
    # Command's goto defaults to none.
    given = {
        k: v
        for k, v in (command or {}).items()
        if v is not None and not (k == "goto" and v in ([], ""))
    }
    return RunOptions(
        command=given or None,
        checkpoint_id=checkpoint_id,
        # An empty list is no static interrupt, as LangGraph reads it.
        interrupt_before=interrupt_before or None,
        interrupt_after=interrupt_after or None,
    )


def _one_of(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of `choices` (None: the first, the default)."""
    if value is None:
        return choices[0]
    if not isinstance(value, str) or value not in choices:
        words = [f"'{choice}'" for choice in choices]
        raise ValueError(f"{name} must be {', '.join(words[:-1])} or {words[-1]}")
    return value
