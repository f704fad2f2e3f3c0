"""A LangGraph API run request, parsed: pure functions, one set of rules for the two
places that read one.

- the service's HTTP door reads the body of ``runs.create``, ``runs.stream`` and
  ``runs.wait`` (:func:`parse_run_request`) and hands the agent its options as
  ``responses/create``'s ``run`` param;
- the bridge reads that ``run`` param (:func:`parse_run_options`), from the service or
  from any caller on NATS, and journals the options with the input, so every
  execution of the turn runs the same way.

The options are a ``Command`` (resume, update, goto) instead of input, a checkpoint
to start from (a fork), static interrupts, the run's ``config`` and ``context``
merged under the assistant's (:func:`merge_assistant`), as LangGraph's server merges
them, what the run's stream shows beyond what every run journals (``stream``:
the stream modes ``checkpoints``, ``tasks``, ``debug`` and ``events``, and
``subgraphs`` for ``stream_subgraphs``), and whether its models' tokens are
journaled at all (``tokens``: false for a run that asks for neither ``messages``
mode, decision 770). A wrong request raises ValueError
saying what is wrong, in the words of the request it came in (``run.checkpoint_id``
on the bridge, ``checkpoint_id`` over HTTP); each door answers it as its own
invalid-request error.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from turnkeeper import _multitask as multitask

#: The top-level key of a journaled input that says what the turn asks for
#: (turnkeeper.agent.bridge._intent): reserved, an input may not carry it.
INTENT_KEY: Final = "__turnkeeper__"
#: The option names, as journaled and as the bridge's ``run`` param holds them.
OPTION_NAMES: Final = (
    "command",
    "checkpoint_id",
    "interrupt_before",
    "interrupt_after",
    "stream",
    "config",
    "context",
    "tokens",
)
#: What a run's ``stream`` option may name: what the agent journals for it only.
STREAM_CAPTURES: Final = ("checkpoints", "tasks", "debug", "events", "subgraphs")
#: The stream modes that show a run's model tokens: a run that asks for neither
#: journals none (decision 770).
TOKEN_MODES: Final = frozenset({"messages", "messages-tuple"})
COMMAND_KEYS: Final = ("resume", "update", "goto")
# What a run does when its thread does not exist, and when its streaming client goes
# away; the default first.
IF_NOT_EXISTS: Final = ("reject", "create")
ON_DISCONNECT: Final = ("continue", "cancel")
# LangGraph's server's namespace for each graph's default assistant id (uuid5 of the
# graph id), so an SDK that computes or stores that id finds the same assistant.
NAMESPACE_GRAPH: Final = uuid.UUID("6ba7b821-9dad-11d1-80b4-00c04fd430c8")
# What of a run's config reaches the graph: RunnableConfig's keys that JSON carries.
CONFIG_KEYS: Final = ("configurable", "tags", "metadata", "recursion_limit", "run_name")
BOTH_GIVEN: Final = (
    "Cannot specify both configurable and context. Prefer setting context alone. Context "
    "was introduced in LangGraph 0.6.0 and is the long term planned replacement for "
    "configurable."
)


# Keys of ``configurable`` a run may not set: where the turn runs (its thread, the
# checkpoint it starts from, which is a fork and a right of its own, its namespace),
# what the service says it is (its run, graph and assistant), and LangGraph's and
# turnkeeper's internal ``__`` keys.
RESERVED_CONFIGURABLE: Final = frozenset(
    {"thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map", "run_id", "graph_id"}
)


def own_configurable(configurable: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keys of a run's ``configurable`` that are the run's to set."""
    return {
        k: v
        for k, v in (configurable or {}).items()
        if k not in RESERVED_CONFIGURABLE and not k.startswith("__")
    }


def default_assistant_id(graph_id: str) -> str:
    """The id of the assistant LangGraph's server makes for each graph."""
    return str(uuid.uuid5(NAMESPACE_GRAPH, graph_id))


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What a run asks for beside its input; None: not asked."""

    command: dict[str, Any] | None = None
    checkpoint_id: str | None = None
    # "*" (every node) or node names.
    interrupt_before: list[str] | str | None = None
    interrupt_after: list[str] | str | None = None
    # Of STREAM_CAPTURES, sorted: journaled for this run's stream.
    stream: list[str] | None = None
    # The run's RunnableConfig (CONFIG_KEYS) and LangGraph's runtime context, merged
    # with its assistant's; None: none.
    config: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    # False: the run's stream shows no token (it asked for neither TOKEN_MODES), so
    # its models are not made to stream and no `token` event is journaled; None:
    # they are, as for every turn not started by such a run (decision 770).
    tokens: bool | None = None

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
    # As sent: merged with the assistant's by merge_assistant, which puts them in
    # the options (``options`` holds neither until then).
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)


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
        stream=_captures(body.get("stream_mode"), body.get("stream_subgraphs")),
        tokens=_tokens(body.get("stream_mode")),
    )
    return RunRequest(
        input=payload,
        command=command,
        options=options,
        multitask_strategy=multitask.parse(body.get("multitask_strategy") or multitask.ENQUEUE),
        if_not_exists=_one_of("if_not_exists", body.get("if_not_exists"), IF_NOT_EXISTS),
        on_disconnect=_one_of("on_disconnect", body.get("on_disconnect"), ON_DISCONNECT),
        config=_config(body.get("config"), where=""),
        context=_mapping("context", body.get("context"), where=""),
    )


def mirror(
    config: dict[str, Any], context: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """LangGraph's server keeps ``config["configurable"]`` and ``context`` one copy of
    each other: the one given is both (giving both non-empty is refused)."""
    configurable = config.get("configurable") or {}
    if configurable and context:
        raise ValueError(BOTH_GIVEN)
    if context:
        return {**config, "configurable": dict(context)}, dict(context)
    return config, dict(configurable)


def merge_assistant(
    run: RunRequest,
    *,
    config: Mapping[str, Any],
    context: Mapping[str, Any],
    assistant_id: str | None = None,
) -> RunOptions:
    """The run's options with its config and context merged over its assistant's
    (``config``, ``context``), as LangGraph's server merges them: each top-level key
    of the run's config replaces the assistant's, ``configurable`` merges key by
    key (RESERVED_CONFIGURABLE left out), and so does ``context``. ``assistant_id``: the assistant's, when it is not
    the graph's default (the agent knows that one), in ``configurable`` as
    LangGraph's. Either empty: left out."""
    run_config, run_context = mirror(run.config, run.context)
    configurable = {
        **own_configurable(config.get("configurable")),
        **own_configurable(run_config.get("configurable")),
    }
    # The assistant's id is the service's to say (LangGraph's server overwrites it).
    configurable.pop("assistant_id", None)
    if assistant_id is not None:
        configurable["assistant_id"] = assistant_id
    merged = {**config, **run_config, "configurable": configurable}
    merged = {k: v for k, v in merged.items() if v not in (None, {}, [])}
    merged_context = {**context, **run_context}
    return replace(run.options, config=merged or None, context=merged_context or None)


def journaled_run(payload: Any, options: RunOptions) -> Any:
    """A run's input as its turn journals it: the input alone when the run asks for
    nothing else, else the input with its options under the run marker (read back by
    turnkeeper.agent.bridge._intent.run_intent). The bridge's ``responses/create``
    and the service's one-message start (decision 370) journal a run this one way."""
    given = options.as_dict()
    if not given:
        return payload
    return {INTENT_KEY: "run", "input": payload, **given}


def parse_run_options(value: Any, payload: Any) -> RunOptions:
    """``responses/create``'s ``run`` param, beside its ``input`` (``payload``)."""
    if not isinstance(value, Mapping):
        raise ValueError("run must be an object")
    unknown = sorted(set(value) - set(OPTION_NAMES))
    if unknown:
        raise ValueError(f"run: unknown option(s) {', '.join(unknown)}")
    options = _options(
        _command(value.get("command"), payload, where="run."),
        value.get("checkpoint_id"),
        value.get("interrupt_before"),
        value.get("interrupt_after"),
        where="run.",
        stream=value.get("stream"),
        tokens=value.get("tokens"),
    )
    return replace(
        options,
        config=_config(value.get("config"), where="run.") or None,
        context=_mapping("context", value.get("context"), where="run.") or None,
    )


def _mapping(name: str, value: Any, *, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}{name} must be an object")
    return dict(value)


def _config(value: Any, *, where: str) -> dict[str, Any]:
    """A run's config, as LangGraph's server takes it (any keys; ``configurable``
    an object, ``tags`` strings, ``recursion_limit`` a whole number). The graph
    gets CONFIG_KEYS of it: others (callbacks …) mean nothing across a process."""
    config = _mapping("config", value, where=where)
    for name in ("configurable", "metadata"):
        _mapping(f"config.{name}", config.get(name), where=where)
    tags = config.get("tags")
    if tags is not None and (
        not isinstance(tags, list) or not all(isinstance(t, str) for t in tags)
    ):
        raise ValueError(f"{where}config.tags must be a list of strings")
    limit = config.get("recursion_limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"{where}config.recursion_limit must be a whole number from 1")
    return {k: v for k, v in config.items() if v is not None}


def _captures(stream_mode: Any, subgraphs: Any) -> list[str] | None:
    """What a request's ``stream_mode`` and ``stream_subgraphs`` ask the agent to
    journal beyond every run's events (the modes themselves are checked by the
    service's stream)."""
    modes = [stream_mode] if isinstance(stream_mode, str) else stream_mode
    named = set(modes) if isinstance(modes, list) else set()
    if subgraphs is True:
        named.add("subgraphs")
    return sorted(named & set(STREAM_CAPTURES)) or None


def _tokens(stream_mode: Any) -> bool | None:
    """False when a request's ``stream_mode`` names neither of TOKEN_MODES (none
    named is LangGraph's default, ``values``); None when it names one. A mode list
    that is not one is the service's stream to refuse."""
    modes = [stream_mode] if isinstance(stream_mode, str) else stream_mode
    if modes is not None and not isinstance(modes, list):
        return None
    return None if TOKEN_MODES & set(modes or ()) else False


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
    stream: Any = None,
    tokens: Any = None,
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
    if stream is not None and (
        not isinstance(stream, list) or not all(n in STREAM_CAPTURES for n in stream)
    ):
        raise ValueError(f"{where}stream must be a list of {', '.join(STREAM_CAPTURES)}")
    if tokens is not None and not isinstance(tokens, bool):
        raise ValueError(f"{where}tokens must be true or false")
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
        stream=sorted(set(stream)) if stream else None,
        # True is the default: left out, as every None option is.
        tokens=False if tokens is False else None,
    )


def _one_of(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of `choices` (None: the first, the default)."""
    if value is None:
        return choices[0]
    if not isinstance(value, str) or value not in choices:
        words = [f"'{choice}'" for choice in choices]
        raise ValueError(f"{name} must be {', '.join(words[:-1])} or {words[-1]}")
    return value
