"""The client core's request rules, by table: the multitask strategies
(turnkeeper._multitask) and a LangGraph API run (turnkeeper._run_request). The service's
HTTP and gRPC doors and the bridge all parse with these functions, so one table says
what each of them accepts and how it refuses the rest.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from turnkeeper import _multitask as multitask
from turnkeeper._run_request import (
    RunOptions,
    RunRequest,
    default_assistant_id,
    merge_assistant,
    parse_run_options,
    parse_run_request,
)
from turnkeeper.v1 import turns_pb2

ONE_OF = "multitask_strategy must be one of reject, enqueue, interrupt, rollback"


@pytest.mark.parametrize(
    ("given", "word"),
    [
        (None, "reject"),
        ("reject", "reject"),
        ("enqueue", "enqueue"),
        ("interrupt", "interrupt"),
        ("rollback", "rollback"),
    ],
)
def test_a_strategy_word_is_parsed_to_itself_and_none_is_reject(given: Any, word: str) -> None:
    assert multitask.parse(given) == word


@pytest.mark.parametrize("given", ["", "REJECT", "cancel", 1, True, ["reject"], {"reject": 1}])
def test_anything_else_is_refused_naming_every_strategy(given: Any) -> None:
    with pytest.raises(ValueError, match=f"^{ONE_OF}$"):
        multitask.parse(given)


@pytest.mark.parametrize(
    ("wire", "word"),
    [
        (turns_pb2.MULTITASK_STRATEGY_UNSPECIFIED, "reject"),
        (turns_pb2.MULTITASK_STRATEGY_REJECT, "reject"),
        (turns_pb2.MULTITASK_STRATEGY_ENQUEUE, "enqueue"),
        (turns_pb2.MULTITASK_STRATEGY_INTERRUPT, "interrupt"),
        (turns_pb2.MULTITASK_STRATEGY_ROLLBACK, "rollback"),
    ],
)
def test_a_wire_value_reads_as_its_word_and_back(
    wire: turns_pb2.MultitaskStrategy.ValueType, word: str
) -> None:
    assert multitask.from_wire(wire) == word
    if wire != turns_pb2.MULTITASK_STRATEGY_UNSPECIFIED:
        assert multitask.to_wire(word) == wire


def test_every_wire_value_but_unset_has_a_word() -> None:
    named = set(turns_pb2.MultitaskStrategy.values()) - {turns_pb2.MULTITASK_STRATEGY_UNSPECIFIED}
    assert {multitask.to_wire(word) for word in multitask.STRATEGIES} == named


def test_an_unknown_wire_value_is_refused_in_the_enum_s_names() -> None:
    unknown = turns_pb2.MultitaskStrategy.ValueType(99)
    with pytest.raises(
        ValueError,
        match=r"^multitask_strategy must be REJECT, ENQUEUE, INTERRUPT or ROLLBACK \(or unset\)$",
    ):
        multitask.from_wire(unknown)


# A LangGraph API run's body: what it parses to.
# A run asks for no tokens unless its stream_mode names a `messages` mode (none named
# is LangGraph's default, `values`): decision 770.
NO_TOKENS = RunOptions(tokens=False)

RUNS: list[tuple[str, dict[str, Any], RunRequest]] = [
    ("an empty body", {}, RunRequest(options=NO_TOKENS)),
    ("input", {"input": {"q": 1}}, RunRequest(options=NO_TOKENS, input={"q": 1})),
    (
        "the lifecycle fields",
        {"multitask_strategy": "enqueue", "if_not_exists": "create", "on_disconnect": "cancel"},
        RunRequest(
            options=NO_TOKENS,
            multitask_strategy="enqueue",
            if_not_exists="create",
            on_disconnect="cancel",
        ),
    ),
    (
        "nulls are the defaults",
        {"multitask_strategy": None, "if_not_exists": None, "on_disconnect": None},
        RunRequest(options=NO_TOKENS),
    ),
    (
        "a resume is a run's option, as LangGraph's server runs it: a new run",
        {"command": {"resume": "yes"}},
        RunRequest(
            command={"resume": "yes"}, options=RunOptions(tokens=False, command={"resume": "yes"})
        ),
    ),
    (
        "a resume of null is no resume (LangGraph's Command reads it so)",
        {"command": {"resume": None}},
        RunRequest(options=NO_TOKENS, command={"resume": None}),
    ),
    (
        "RemoteGraph's resume (its whole Command): a null graph and an empty goto are none",
        {"command": {"graph": None, "update": None, "resume": "yes", "goto": []}},
        RunRequest(
            command={"update": None, "resume": "yes", "goto": []},
            options=RunOptions(tokens=False, command={"resume": "yes"}),
        ),
    ),
    (
        "the strategy by default is LangGraph's server's: enqueue",
        {"input": 1},
        RunRequest(options=NO_TOKENS, input=1, multitask_strategy="enqueue"),
    ),
    (
        "update and goto are an option, null fields left out",
        {"command": {"update": {"x": 1}, "goto": None}},
        RunRequest(
            command={"update": {"x": 1}, "goto": None},
            options=RunOptions(tokens=False, command={"update": {"x": 1}}),
        ),
    ),
    (
        "an empty command is none",
        {"command": {}, "input": 1},
        RunRequest(options=NO_TOKENS, input=1),
    ),
    (
        "a command of nulls is no option",
        {"command": {"update": None, "goto": None}},
        RunRequest(options=NO_TOKENS, command={"update": None, "goto": None}),
    ),
    (
        "a checkpoint id (a fork)",
        {"checkpoint_id": "c1"},
        RunRequest(options=RunOptions(tokens=False, checkpoint_id="c1")),
    ),
    (
        "a checkpoint id inside checkpoint",
        {"checkpoint": {"checkpoint_id": "c2", "checkpoint_ns": ""}},
        RunRequest(options=RunOptions(tokens=False, checkpoint_id="c2")),
    ),
    (
        "checkpoint_id before checkpoint",
        {"checkpoint_id": "c1", "checkpoint": {"checkpoint_id": "c2"}},
        RunRequest(options=RunOptions(tokens=False, checkpoint_id="c1")),
    ),
    (
        "a checkpoint without an id",
        {"checkpoint": {"checkpoint_ns": ""}},
        RunRequest(options=NO_TOKENS),
    ),
    (
        "static interrupts",
        {"interrupt_before": "*", "interrupt_after": ["a", "b"]},
        RunRequest(
            options=RunOptions(tokens=False, interrupt_before="*", interrupt_after=["a", "b"])
        ),
    ),
    ("an empty list is no interrupt", {"interrupt_before": []}, RunRequest(options=NO_TOKENS)),
    (
        "stream modes only some runs journal, and subgraphs",
        {"stream_mode": ["values", "tasks", "events"], "stream_subgraphs": True},
        RunRequest(options=RunOptions(tokens=False, stream=["events", "subgraphs", "tasks"])),
    ),
    (
        "stream modes every run journals are no option",
        {"stream_mode": "updates", "stream_subgraphs": False},
        RunRequest(options=NO_TOKENS),
    ),
    (
        "a `messages` mode asks for the tokens: journaled, as by default (decision 770)",
        {"stream_mode": ["values", "messages-tuple"]},
        RunRequest(),
    ),
    ("`messages` alone", {"stream_mode": "messages"}, RunRequest()),
    (
        "with the modes only some runs journal",
        {"stream_mode": ["messages", "events"]},
        RunRequest(options=RunOptions(stream=["events"])),
    ),
]


@pytest.mark.parametrize(("body", "parsed"), [r[1:] for r in RUNS], ids=[r[0] for r in RUNS])
def test_a_run_body_parses_to_its_request(body: dict[str, Any], parsed: RunRequest) -> None:
    assert parse_run_request(body) == parsed


# A LangGraph API run's body: how it is refused (the HTTP door answers 422 with it).
REFUSED_RUNS: list[tuple[dict[str, Any], str]] = [
    ({"multitask_strategy": "later"}, ONE_OF),
    ({"multitask_strategy": 3}, ONE_OF),
    ({"if_not_exists": "make"}, "if_not_exists must be 'reject' or 'create'"),
    ({"on_disconnect": "stop"}, "on_disconnect must be 'continue' or 'cancel'"),
    ({"command": "resume"}, "command must be an object of resume, update and goto"),
    ({"command": {"resume": 1, "jump": 2}}, "command takes resume, update and goto, not jump"),
    (
        {"command": {"resume": 1, "graph": "__parent__"}},
        "command.graph must be null: a run's Command is for its own graph",
    ),
    ({"command": {"resume": 1}, "input": 2}, "send input or a command, not both"),
    ({"command": {"goto": "n"}, "input": {}}, "send input or a command, not both"),
    ({"checkpoint_id": 7}, "checkpoint_id must be a non-empty string"),
    ({"checkpoint": {"checkpoint_id": ""}}, "checkpoint_id must be a non-empty string"),
    ({"interrupt_before": "a"}, "interrupt_before must be '*' or a list of node names"),
    ({"interrupt_after": ["a", 1]}, "interrupt_after must be '*' or a list of node names"),
]


@pytest.mark.parametrize(("body", "message"), REFUSED_RUNS)
def test_a_wrong_run_body_is_refused_saying_what_is_wrong(
    body: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_run_request(body)


# The bridge's `run` param, beside its input: what it parses to.
OPTIONS: list[tuple[dict[str, Any], Any, RunOptions]] = [
    ({}, "hi", RunOptions()),
    ({"command": {"resume": 1}}, None, RunOptions(command={"resume": 1})),
    ({"command": {"update": None, "goto": "n"}}, None, RunOptions(command={"goto": "n"})),
    ({"command": {"resume": None}}, None, RunOptions()),
    ({"command": {}}, "hi", RunOptions()),
    ({"checkpoint_id": "c1"}, "hi", RunOptions(checkpoint_id="c1")),
    (
        {"interrupt_before": ["a"], "interrupt_after": "*"},
        None,
        RunOptions(interrupt_before=["a"], interrupt_after="*"),
    ),
    ({"interrupt_before": [], "interrupt_after": None}, None, RunOptions()),
    ({"stream": ["tasks", "checkpoints"]}, "hi", RunOptions(stream=["checkpoints", "tasks"])),
    ({"tokens": False}, "hi", RunOptions(tokens=False)),
    # True is the default, left out as every default is.
    ({"tokens": True}, "hi", RunOptions()),
]


@pytest.mark.parametrize(("value", "payload", "parsed"), OPTIONS)
def test_a_run_param_parses_to_its_options(value: Any, payload: Any, parsed: RunOptions) -> None:
    assert parse_run_options(value, payload) == parsed


# The bridge's `run` param: how it is refused (the bridge answers -32602 with it).
REFUSED_OPTIONS: list[tuple[Any, Any, str]] = [
    ("fork", None, "run must be an object"),
    ([], None, "run must be an object"),
    ({"webhook": "x", "after": 1}, None, "run: unknown option(s) after, webhook"),
    ({"command": 1}, None, "run.command must be an object of resume, update and goto"),
    ({"command": {"jump": 1}}, None, "run.command takes resume, update and goto, not jump"),
    ({"command": {"resume": 1}}, "hi", "send input or run.command, not both"),
    ({"checkpoint_id": ""}, None, "run.checkpoint_id must be a non-empty string"),
    ({"checkpoint_id": 1}, None, "run.checkpoint_id must be a non-empty string"),
    ({"interrupt_after": "node"}, None, "run.interrupt_after must be '*' or a list of node names"),
    (
        {"stream": ["values"]},
        None,
        "run.stream must be a list of checkpoints, tasks, debug, events, subgraphs",
    ),
    ({"tokens": "no"}, None, "run.tokens must be true or false"),
]


@pytest.mark.parametrize(("value", "payload", "message"), REFUSED_OPTIONS)
def test_a_wrong_run_param_is_refused_saying_what_is_wrong(
    value: Any, payload: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_run_options(value, payload)


@pytest.mark.parametrize(
    "options",
    [
        RunOptions(),
        RunOptions(command={"update": {"x": 1}, "goto": "n"}, checkpoint_id="c"),
        RunOptions(interrupt_before="*", interrupt_after=["a"]),
        RunOptions(stream=["events"], tokens=False),
    ],
)
def test_the_options_the_service_sends_parse_back_to_themselves_on_the_bridge(
    options: RunOptions,
) -> None:
    assert parse_run_options(options.as_dict(), None) == options


def test_a_runs_config_and_context_merge_over_its_assistants() -> None:
    run = parse_run_request(
        {"input": {}, "config": {"configurable": {"user": "run"}, "tags": ["run"]}}
    )
    # LangGraph's server mirrors configurable into the context (and back).
    assert (run.config, run.context) == (
        {"configurable": {"user": "run"}, "tags": ["run"]},
        {},
    )
    options = merge_assistant(
        run,
        config={"configurable": {"user": "a", "model": "a"}, "tags": ["a"], "run_name": "a"},
        context={"user": "a", "model": "a"},
        assistant_id="a-1",
    )
    assert options.config == {
        "configurable": {"user": "run", "model": "a", "assistant_id": "a-1"},
        "tags": ["run"],
        "run_name": "a",
    }
    assert options.context == {"user": "run", "model": "a"}
    # What the service sends, the bridge reads back the same.
    assert parse_run_options(options.as_dict(), {}) == options
    # Where the turn runs and what it is are not the run's to set.
    reserved = parse_run_request(
        {
            "config": {
                "configurable": {
                    "thread_id": "other",
                    "checkpoint_id": "fork-without-the-right",
                    "checkpoint_ns": "elsewhere",
                    "run_id": "r",
                    "graph_id": "g",
                    "assistant_id": "spoofed",
                    "__pregel_internal": 1,
                    "prompt": "kept",
                }
            }
        }
    )
    merged = merge_assistant(reserved, config={}, context={})
    assert merged.config == {"configurable": {"prompt": "kept"}}
    # Nothing given and an assistant with nothing: no option but the tokens it asks
    # none of (no `messages` mode, decision 770).
    assert merge_assistant(parse_run_request({}), config={}, context={}).as_dict() == {
        "tokens": False
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"config": {"configurable": {"a": 1}}, "context": {"b": 2}}, "Cannot specify both"),
        ({"config": []}, "^config must be an object$"),
        ({"config": {"configurable": 1}}, "^config.configurable must be an object$"),
        ({"config": {"tags": "x"}}, "^config.tags must be a list of strings$"),
        ({"config": {"recursion_limit": 0}}, "^config.recursion_limit must be a whole number"),
        ({"context": "x"}, "^context must be an object$"),
    ],
)
def test_a_wrong_config_or_context_is_refused(body: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        merge_assistant(parse_run_request(body), config={}, context={})


def test_a_graphs_default_assistant_id_is_langgraphs() -> None:
    # The id `langgraph dev` gives the default assistant of a graph named "agent".
    assert default_assistant_id("agent") == "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
