"""Writes the cross-language test vectors in vectors/ from the Python implementation.

    python scripts/gen_vectors.py            # from the repository root: (re)write them
    python scripts/gen_vectors.py --check    # exit 1 if a committed file differs

Each rule that Python and TypeScript both implement has one JSON file: its cases'
inputs (written here, once) and the outputs the Python client computes for them.
tests/packaging/test_vectors.py and clients/node/test/vectors.test.ts read the
committed files and compare each implementation with them; neither regenerates
anything. A changed expectation is a change of the rule: rerun this script, read
the diff, and say why in the commit (vectors/README.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

from langchain_core.messages import ToolMessage
from turnkeeper import _caller_assertion as caller_assertion
from turnkeeper import _graph_versions as graph_versions
from turnkeeper import _nats_identity as nats_identity
from turnkeeper import states
from turnkeeper.agent._fingerprint import GraphVersion
from turnkeeper.agent.bridge import _intent as intent
from turnkeeper.agent.bridge._capture import EventCapture
from turnkeeper.agent.bridge._events import EventLog
from turnkeeper.agent.bridge._idempotency import idempotency_key
from turnkeeper.agent.effect._key import CallSite
from turnkeeper.agent.saver import _executions as executions
from turnkeeper.agent.saver._identity import TurnIdentity

ROOT = Path(__file__).resolve().parents[1]
VECTORS = ROOT / "vectors"

Case = dict[str, Any]


def case(name: str, input: Mapping[str, Any], expected: Mapping[str, Any]) -> Case:
    return {"name": name, "input": dict(input), "expected": dict(expected)}


# -- effect keys -------------------------------------------------------------------


def effect_key(parts: Mapping[str, Any]) -> str:
    """The key CallSite derives from `parts` (the fields the vector gives)."""
    identity = TurnIdentity(parts["turn_id"], 0)
    site = CallSite(
        identity=identity,
        thread_id=parts["thread_id"],
        task_id=parts["task_id"],
        checkpoint_ns=parts["checkpoint_ns"],
        checkpoint_id="",
        node_attempt=parts["node_attempt"],
        name=parts["name"],
        call_index=parts["call_index"],
        execution=executions.Execution(scratchpad=object()),
        checkpointer=None,
    )
    return site.key


_BASE_CALL: dict[str, Any] = {
    "thread_id": "thread-1",
    "turn_id": "turn-1",
    "checkpoint_ns": "charge_node:6f1c2b3a-0d4e-5f60-8a9b-0c1d2e3f4a5b",
    "task_id": "6f1c2b3a-0d4e-5f60-8a9b-0c1d2e3f4a5b",
    "node_attempt": 1,
    "name": "charge",
    "call_index": 0,
}


def effect_key_cases() -> list[Case]:
    variants: list[tuple[str, dict[str, Any]]] = [
        ("the first call of an effect in a task's first try", {}),
        ("the second call of the same effect", {"call_index": 1}),
        ("another effect in the same task", {"name": "refund"}),
        ("another thread", {"thread_id": "thread-2"}),
        ("a fork: another turn from the same checkpoint", {"turn_id": "turn-2"}),
        ("a RetryPolicy's second try of the node", {"node_attempt": 2}),
        ("a RetryPolicy's third try, second call", {"node_attempt": 3, "call_index": 1}),
        ("a task of a subgraph", {"checkpoint_ns": "outer:1|inner:2"}),
        ("the root namespace", {"checkpoint_ns": ""}),
        ("another task", {"task_id": "00000000-0000-5000-8000-000000000000"}),
        ("non-ASCII parts, hashed as UTF-8", {"thread_id": "fil-é", "name": "envoyer ✉"}),
        ("a name beyond the BMP", {"name": "rocket-\U0001f680"}),
    ]
    cases = []
    for name, changes in variants:
        parts = {**_BASE_CALL, **changes}
        cases.append(case(name, parts, {"key": effect_key(parts)}))
    return cases


# -- step idempotency keys ---------------------------------------------------------


def step_key_cases() -> list[Case]:
    configs = [
        ("a step of a first attempt", "turn-1", 0, 3),
        ("the same step re-driven", "turn-1", 1, 3),
        ("the first step", "2c6f0d6e-1a2b-4c3d-9e8f-7a6b5c4d3e2f", 0, 0),
    ]
    cases = []
    for name, turn_id, attempt, step in configs:
        config: Any = {
            "configurable": {"turn_id": turn_id, "attempt": attempt},
            "metadata": {"langgraph_step": step},
        }
        cases.append(case(name, {"config": config}, {"key": idempotency_key(config)}))
    return cases


# -- caller assertions -------------------------------------------------------------

_TOKENS = ["agent-token-one", "agent-token-two", "jeton-été-✓", ""]


def key_cases() -> list[Case]:
    cases = []
    for token in _TOKENS:
        digest = caller_assertion.token_digest(token)
        key = caller_assertion.key_of(digest)
        cases.append(
            case(
                f"the keys of token {token!r}",
                {"token": token},
                {"digest": digest, "key_hex": key.hex(), "key_id": caller_assertion.key_id(key)},
            )
        )
    return cases


def _assertion(fields: Mapping[str, Any]) -> caller_assertion.CallerAssertion:
    return caller_assertion.CallerAssertion(
        agent=fields["agent"],
        method=fields["method"],
        request_id=fields["request_id"],
        name=fields["name"],
        role=fields["role"],
        caller_agent=fields["caller_agent"],
        methods=tuple(fields["methods"]),
        expires_at=fields["expires_at"],
    )


def _assertion_json(found: caller_assertion.CallerAssertion) -> dict[str, Any]:
    return {
        "agent": found.agent,
        "method": found.method,
        "request_id": found.request_id,
        "name": found.name,
        "role": found.role,
        "caller_agent": found.caller_agent,
        "methods": list(found.methods),
        "expires_at": found.expires_at,
        "who": found.who,
    }


_OPERATOR: dict[str, Any] = {
    "agent": "billing",
    "method": "responses/create",
    "request_id": "req-1",
    "name": "alice",
    "role": "operator",
    "caller_agent": "",
    "methods": ["responses/create", "turns/cancel"],
    "expires_at": 1767225660.25,
}


def sign_cases() -> list[Case]:
    variants: list[tuple[str, dict[str, Any], list[str]]] = [
        ("an operator's call, one key", {}, ["agent-token-one"]),
        ("two tokens of the agent: a signature each", {}, ["agent-token-one", "agent-token-two"]),
        (
            "an agent calling another agent",
            {"role": "agent", "name": "planner-token", "caller_agent": "planner"},
            ["agent-token-one"],
        ),
        ("no methods", {"methods": []}, ["agent-token-one"]),
        (
            "non-ASCII names, escaped in the payload",
            {"name": "zoë ✓", "request_id": "r-𝄞"},
            ["jeton-été-✓"],
        ),
        ("an expiry of whole seconds", {"expires_at": 1767225660.0}, ["agent-token-one"]),
        (
            "an expiry rounded to milliseconds",
            {"expires_at": 1767225660.123456},
            ["agent-token-one"],
        ),
        # 0.0625 = 1/16: exactly halfway between two thousandths; Python's round goes to even.
        (
            "an expiry halfway between milliseconds",
            {"expires_at": 1767225660.0625},
            ["agent-token-one"],
        ),
        ("a numeric request id, as its text", {"request_id": "42"}, ["agent-token-one"]),
    ]
    cases = []
    for name, changes, tokens in variants:
        fields = {**_OPERATOR, **changes}
        keys = [caller_assertion.key_of(caller_assertion.token_digest(t)) for t in tokens]
        header = caller_assertion.sign(_assertion(fields), keys)
        cases.append(case(name, {"assertion": fields, "tokens": tokens}, {"header": header}))
    return cases


def verify_cases() -> list[Case]:
    one = caller_assertion.key_of(caller_assertion.token_digest("agent-token-one"))
    two = caller_assertion.key_of(caller_assertion.token_digest("agent-token-two"))
    good = caller_assertion.sign(_assertion(_OPERATOR), [one])
    both = caller_assertion.sign(_assertion(_OPERATOR), [two, one])
    exp = _OPERATOR["expires_at"]
    checks: list[tuple[str, dict[str, Any]]] = [
        ("a good assertion", {"header": good, "method": "responses/create", "request_id": "req-1"}),
        ("a good assertion, method and request id not asked", {"header": good}),
        ("signed for two tokens, verified by the second", {"header": both}),
        ("still good within the clock skew", {"header": good, "now": exp + 29.5}),
        ("expired past the skew", {"header": good, "now": exp + 45.0}),
        ("expired by a count of seconds that is a tie", {"header": good, "now": exp + 32.5}),
        ("for another agent", {"header": good, "agent": "shipping"}),
        ("for another method", {"header": good, "method": "turns/cancel"}),
        ("for another request", {"header": good, "request_id": "req-2"}),
        ("not signed with this agent's token", {"header": good, "tokens": ["agent-token-two"]}),
        ("empty", {"header": ""}),
        ("too long", {"header": good + "," + "x" * 8192}),
        (
            "a signature tampered with",
            {"header": good[:-2] + ("AA" if good[-2:] != "AA" else "BB")},
        ),
        ("no signature", {"header": good.partition(".")[0]}),
    ]
    cases = []
    for name, given in checks:
        inputs: dict[str, Any] = {
            "header": given["header"],
            "tokens": given.get("tokens", ["agent-token-one"]),
            "agent": given.get("agent", "billing"),
            "method": given.get("method"),
            "request_id": given.get("request_id"),
            "now": given.get("now", exp - 10.0),
        }
        keys = [caller_assertion.key_of(caller_assertion.token_digest(t)) for t in inputs["tokens"]]
        try:
            found = caller_assertion.verify(
                inputs["header"],
                keys,
                agent=inputs["agent"],
                method=inputs["method"],
                request_id=inputs["request_id"],
                now=inputs["now"],
            )
        except caller_assertion.AssertionRefused as exc:
            expected: dict[str, Any] = {"refused": str(exc)}
        else:
            expected = {"assertion": _assertion_json(found)}
        cases.append(case(name, inputs, expected))
    return cases


# -- NATS identities ---------------------------------------------------------------


def nats_cases() -> list[Case]:
    cases = []
    for token in _TOKENS:
        found = nats_identity.identity_of(token)
        cases.append(
            case(
                f"the NATS user of token {token!r}",
                {"token": token},
                {
                    "user": found.user,
                    "password": found.password,
                    "inbox_prefix": found.inbox_prefix,
                },
            )
        )
    return cases


# -- canonical JSON and graph fingerprints -----------------------------------------

_CANONICAL_VALUES: list[tuple[str, Any]] = [
    ("null", None),
    ("booleans and integers", [True, False, 0, -7, 9007199254740991]),
    ("a float with a fraction", {"ratio": 0.5, "pi": 3.25}),
    ("nested objects' keys sorted", {"b": 1, "a": [{"d": 1, "c": 2}], "": {"z": None, "y": []}}),
    ("non-ASCII escaped", {"name": "café", "sign": "✓", "del": "\x7f"}),
    ("beyond the BMP as a surrogate pair", {"clef": "𝄞", "face": "😀"}),
    ("control characters and quotes", {"text": 'line\nbreak\ttab "quoted" \\ \x01'}),
    ("keys sorted by code point", {"\uff01": 1, "😀": 2, "a": 3, "é": 4, "Z": 5}),
    ("an empty object and array", {"o": {}, "a": []}),
]


def canonical_cases() -> list[Case]:
    return [
        case(name, {"value": value}, {"text": graph_versions.canonical(value)})
        for name, value in _CANONICAL_VALUES
    ]


_SHAPE: dict[str, Any] = {
    "format": graph_versions.SHAPE_FORMAT,
    "nodes": {
        "agent": {"triggers": ["branch:to:agent"], "reads": ["messages"]},
        "tools": {"triggers": ["branch:to:tools"], "reads": ["messages"]},
    },
    "channels": {
        "branch:to:agent": "EphemeralValue",
        "branch:to:tools": "EphemeralValue",
        "messages": "BinaryOperatorAggregate(langgraph.graph.message.add_messages)",
        "__start__": "EphemeralValue",
    },
    "input": ["__start__"],
    "output": ["messages"],
    "interrupt_before": [],
    "interrupt_after": "*",
    "edges": [["__start__", "agent"], ["tools", "agent"]],
    "branches": {"agent": {"tools_condition": ["__end__", "tools"]}},
    "state": {"messages": "list"},
}


def fingerprint_cases() -> list[Case]:
    variants: list[tuple[str, Any, str]] = [
        ("a tool-calling agent's shape, no label", _SHAPE, ""),
        ("the same shape with a label", _SHAPE, "v2"),
        ("a non-ASCII label", _SHAPE, "révision ✓"),
        ("an empty shape", {}, ""),
        (
            "a branch that may go anywhere",
            {**_SHAPE, "branches": {"agent": {"route": None}}},
            "",
        ),
    ]
    return [
        case(
            name,
            {"shape": shape, "label": label},
            {"fingerprint": graph_versions.fingerprint(shape, label)},
        )
        for name, shape, label in variants
    ]


def stamp_cases() -> list[Case]:
    checkpoints: list[tuple[str, dict[str, Any]]] = [
        (
            "the agent is to run: its trigger was written since it last ran",
            {
                "channel_versions": {"branch:to:agent": 3, "messages": 3},
                "versions_seen": {"agent": {"branch:to:agent": 1}},
                "channel_values": {"branch:to:agent": None, "messages": []},
            },
        ),
        (
            "nothing to run: every trigger seen",
            {
                "channel_versions": {"branch:to:agent": 2, "messages": 4},
                "versions_seen": {"agent": {"branch:to:agent": 2}},
                "channel_values": {"messages": []},
            },
        ),
        (
            "string versions, compared as text",
            {
                "channel_versions": {"branch:to:tools": "00000000000000000000000000000002.0.1"},
                "versions_seen": {
                    "tools": {"branch:to:tools": "00000000000000000000000000000001.0.9"}
                },
                "channel_values": {"branch:to:tools": "x", "unknown": 1},
            },
        ),
        ("an empty checkpoint", {}),
    ]
    version = GraphVersion(_SHAPE, "v2", graph_versions.fingerprint(_SHAPE, "v2"))
    return [
        case(
            name,
            {"shape": _SHAPE, "label": "v2", "checkpoint": checkpoint},
            {"stamp": version.stamp(checkpoint).to_json()},
        )
        for name, checkpoint in checkpoints
    ]


# -- run intents -------------------------------------------------------------------

_JOURNALED: list[tuple[str, Any]] = [
    ("a continuation", None),
    ("a regenerate", {"__turnkeeper__": "regenerate"}),
    ("a regenerate marker with more keys", {"__turnkeeper__": "regenerate", "x": 1}),
    ("a LangGraph API run", {"__turnkeeper__": "run", "input": {"messages": []}}),
    ("new input", {"messages": [{"role": "user", "content": "hi"}]}),
    ("new input that is text", "hello"),
    ("a list", [{"__turnkeeper__": "regenerate"}]),
    ("another marker value", {"__turnkeeper__": "something"}),
    (
        "a LangGraph API run with options",
        {
            "__turnkeeper__": "run",
            "input": None,
            "command": {"resume": "yes"},
            "checkpoint_id": "1f0-c",
            "interrupt_before": ["review"],
            "config": {"configurable": {"user": "u1"}, "tags": ["t"]},
            "context": {"model": "small"},
        },
    ),
]


def _run_read_back(value: Any) -> Any:
    """A journaled run as an execution reads it back, written again (None: no run)."""
    run = intent.run_intent(value)
    return None if run is None else run.journaled()


def intent_cases() -> list[Case]:
    return [
        case(
            name,
            {"journaled": value},
            {
                "regenerate": intent.is_regenerate(value),
                "reserved": intent.is_reserved(value),
                "run": _run_read_back(value),
            },
        )
        for name, value in _JOURNALED
    ]


# -- turn states -------------------------------------------------------------------


def state_cases() -> list[Case]:
    cases = []
    # The generated enum's numbers, UNSPECIFIED (0, never sent) and one past the last.
    for number in range(9):
        state = states.TurnState.from_proto(number)
        cases.append(
            case(
                f"the state numbered {number}",
                {"proto": number},
                {
                    "name": state.value,
                    "word": state.word,
                    "contract_word": state.contract_word,
                    "live": state.live,
                },
            )
        )
    answers: list[tuple[str, dict[str, Any]]] = [
        ("a contract answer: state and status", {"status": "running", "state": "queued"}),
        ("an answer with status only", {"status": "parked"}),
        ("an older bridge's upper-case word", {"status": "DONE"}),
        ("a word nobody knows", {"status": "finished"}),
        ("a state that is not text", {"state": 3, "status": "done"}),
        ("a state of null, beside a status", {"state": None, "status": "running"}),
        ("neither", {}),
    ]
    for name, answer in answers:
        cases.append(
            case(name, {"answer": answer}, {"name": states.TurnState.from_answer(answer).value})
        )
    cases.append(
        case(
            "the event types that end a turn",
            {},
            {"terminal_event_types": sorted(states.TERMINAL_EVENT_TYPES)},
        )
    )
    return cases


# -- captured events -----------------------------------------------------------------


class _Recorder:
    """What EventCapture emits, in order (an EventLog's emit, nothing sent)."""

    turn_id = "turn-1"

    def __init__(self) -> None:
        self.events: list[list[Any]] = []

    def emit(self, type_: str, data: Any, *, plain: bool = False) -> None:
        # `plain`: data already JSON (decision 521); the same data either way.
        self.events.append([type_, data])


def _run(name: str | None) -> uuid.UUID | None:
    return None if name is None else uuid.uuid5(uuid.NAMESPACE_URL, name)


def captured(callbacks: list[dict[str, Any]]) -> list[list[Any]]:
    """The events EventCapture emits for a script of LangChain callbacks (the
    vector's neutral form: each language's test calls its own handler's methods)."""
    recorder = _Recorder()
    capture = EventCapture(cast(EventLog, recorder))
    for c in callbacks:
        run = _run(c["run"])
        assert run is not None
        metadata = {"langgraph_node": c["node"]} if c.get("node") is not None else {}
        if c.get("step") is not None:
            metadata["langgraph_step"] = c["step"]
        if c["on"] == "chain_start":
            capture.on_chain_start(
                None,
                {},
                run_id=run,
                parent_run_id=_run(c["parent"]),
                metadata=metadata,
                name=c["name"],
            )
        elif c["on"] == "chain_end":
            capture.on_chain_end(c["outputs"], run_id=run)
        elif c["on"] == "chain_error":
            capture.on_chain_error(RuntimeError(c["error"]), run_id=run)
        elif c["on"] == "chat_model_start":
            capture.on_chat_model_start({}, [[]], run_id=run, metadata=metadata)
        elif c["on"] == "llm_new_token":
            capture.on_llm_new_token(c["token"], run_id=run)
        elif c["on"] == "llm_end":
            capture.on_llm_end(None, run_id=run)
        elif c["on"] == "tool_start":
            parsed = json.loads(c["input"]) if c["input"].startswith("{") else None
            capture.on_tool_start(
                {"name": c["name"]},
                c["input"],
                run_id=run,
                metadata=metadata,
                inputs=parsed,
                tool_call_id=c["tool_call_id"],
            )
        elif c["on"] == "tool_end":
            output = c["output"]
            if c.get("message"):
                output = ToolMessage(content=output, tool_call_id=c["tool_call_id"])
            capture.on_tool_end(output, run_id=run)
        elif c["on"] == "tool_error":
            error = type(c["error"]["type"], (Exception,), {})(c["error"]["message"])
            capture.on_tool_error(error, run_id=run)
        else:
            raise ValueError(f"no callback {c['on']!r}")
    return recorder.events


_ROOT = {"on": "chain_start", "run": "graph", "parent": None, "name": "LangGraph"}


def capture_cases() -> list[Case]:
    scripts: list[tuple[str, list[dict[str, Any]]]] = [
        (
            "a node of the graph is a step when it ends",
            [
                _ROOT,
                {
                    "on": "chain_start",
                    "run": "n1",
                    "parent": "graph",
                    "node": "plan",
                    "name": "plan",
                    "step": 1,
                },
                {"on": "chain_end", "run": "n1", "outputs": {"log": ["planned"]}},
                {"on": "chain_end", "run": "graph", "outputs": {"log": ["planned"]}},
            ],
        ),
        (
            "a chain inside a node, and a failed node, are no step",
            [
                _ROOT,
                {
                    "on": "chain_start",
                    "run": "n1",
                    "parent": "graph",
                    "node": "act",
                    "name": "act",
                    "step": 2,
                },
                {
                    "on": "chain_start",
                    "run": "inner",
                    "parent": "n1",
                    "node": "act",
                    "name": "act",
                    "step": 2,
                },
                {"on": "chain_end", "run": "inner", "outputs": {"x": 1}},
                {"on": "chain_error", "run": "n1", "error": "boom"},
            ],
        ),
        (
            "a chat model's tokens, named by the node; an empty one is dropped",
            [
                {"on": "chat_model_start", "run": "m1", "node": "agent"},
                {"on": "llm_new_token", "run": "m1", "token": "Hel"},
                {"on": "llm_new_token", "run": "m1", "token": ""},
                {"on": "llm_new_token", "run": "m1", "token": "lo ✓"},
                {"on": "llm_end", "run": "m1"},
                {"on": "llm_new_token", "run": "m1", "token": "late"},
            ],
        ),
        (
            "a tool call that returns a message, and one that fails",
            [
                {
                    "on": "tool_start",
                    "run": "t1",
                    "node": "tools",
                    "name": "lookup",
                    "tool_call_id": "call-1",
                    "input": '{"city": "Oslo"}',
                },
                {
                    "on": "tool_end",
                    "run": "t1",
                    "output": "sunny in Oslo",
                    "message": True,
                    "tool_call_id": "call-1",
                },
                {
                    "on": "tool_start",
                    "run": "t2",
                    "node": "tools",
                    "name": "broken",
                    "tool_call_id": None,
                    "input": '{"retries": 0}',
                },
                {
                    "on": "tool_error",
                    "run": "t2",
                    "error": {"type": "TimeoutError", "message": "no network"},
                },
            ],
        ),
        (
            "a tool with a text input and a plain output",
            [
                {
                    "on": "tool_start",
                    "run": "t1",
                    "node": "tools",
                    "name": "echo",
                    "tool_call_id": None,
                    "input": "hello",
                },
                {"on": "tool_end", "run": "t1", "output": ["a", 1]},
                {"on": "tool_end", "run": "t1", "output": "again: no call open"},
            ],
        ),
    ]
    return [
        case(name, {"callbacks": callbacks}, {"events": captured(callbacks)})
        for name, callbacks in scripts
    ]


# -- the files ---------------------------------------------------------------------

# file name -> (what the rule is, where each language implements it, the cases)
RULES: dict[str, tuple[str, str, str, Callable[[], list[Case]]]] = {
    "effect_keys.json": (
        "An effect call's idempotency key (docs/effects.md).",
        "turnkeeper.agent.effect._key.CallSite.key",
        "clients/node/src/effect/key.ts keyOf",
        effect_key_cases,
    ),
    "step_keys.json": (
        "A step's idempotency key for tools: turn_id:step:attempt.",
        "turnkeeper.agent.bridge._idempotency.idempotency_key",
        "clients/node/src/runner/execution.ts idempotencyKey",
        step_key_cases,
    ),
    "caller_assertion_keys.json": (
        "A token's digest, signing key and key id (caller assertions).",
        "turnkeeper._caller_assertion.token_digest, key_of, key_id",
        "clients/node/src/callerAssertion.ts tokenDigest, keyOf, keyId",
        key_cases,
    ),
    "caller_assertion_signatures.json": (
        "The Turnkeeper-Assertion header signed for an assertion with the given tokens.",
        "turnkeeper._caller_assertion.sign",
        "clients/node/src/callerAssertion.ts sign",
        sign_cases,
    ),
    "caller_assertion_verifications.json": (
        "What verify makes of a header: the assertion, or the refusal's message.",
        "turnkeeper._caller_assertion.verify (and CallerAssertion.who)",
        "clients/node/src/callerAssertion.ts verify (and who)",
        verify_cases,
    ),
    "nats_identities.json": (
        "The NATS user, password and inbox prefix a token stands for.",
        "turnkeeper._nats_identity.identity_of",
        "clients/node/src/natsIdentity.ts natsIdentityOf",
        nats_cases,
    ),
    "canonical_json.json": (
        "The one JSON text of a value (fingerprints, an effect's arguments).",
        "turnkeeper._graph_versions.canonical",
        "clients/node/src/canonical.ts canonical",
        canonical_cases,
    ),
    "graph_fingerprints.json": (
        "A graph version's fingerprint: SHA-256 of the canonical {label, shape}.",
        "turnkeeper._graph_versions.fingerprint",
        "clients/node/src/runner/version.ts fingerprint",
        fingerprint_cases,
    ),
    "graph_stamps.json": (
        "The stamp a checkpoint records about the graph version that wrote it.",
        "turnkeeper.agent._fingerprint.GraphVersion.stamp",
        "clients/node/src/runner/version.ts GraphVersion.stamp",
        stamp_cases,
    ),
    "turn_states.json": (
        "A turn's state: by proto number, its wire words, read from an answer; terminal event types.",
        "turnkeeper.states.TurnState (from_proto, word, contract_word, live, from_answer)",
        "clients/node/src/states.ts stateName, runner/status.ts, follow.ts",
        state_cases,
    ),
    "captured_events.json": (
        "The events a run's LangChain callbacks become: step, token, tool_call_start/end.",
        "turnkeeper.agent.bridge._capture.EventCapture",
        "clients/node/src/runner/capture.ts EventCapture",
        capture_cases,
    ),
    "run_intents.json": (
        "What a turn's journaled input asks for: a regenerate, an input refused as "
        "reserved, or a LangGraph API run with its options, read back.",
        "turnkeeper.agent.bridge._intent.is_regenerate, is_reserved, run_intent",
        "clients/node/src/runner/intent.ts isRegenerate, isReserved, runIntent",
        intent_cases,
    ),
}


def render(file: str) -> str:
    rule, python, typescript, cases = RULES[file]
    document = {
        "rule": rule,
        "python": python,
        "typescript": typescript,
        "generated_by": "scripts/gen_vectors.py",
        "cases": cases(),
    }
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args(argv)
    stale = []
    for file in RULES:
        path = VECTORS / file
        text = render(file)
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(file)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"vectors differ from the Python implementation: {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
