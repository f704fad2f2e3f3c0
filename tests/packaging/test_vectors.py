"""The Python client computes what the cross-language vectors say (vectors/README.md).

One test per case of each file in vectors/; clients/node/test/vectors.test.ts runs
the same cases against the TypeScript client. A case that fails here means the
Python rule changed: if on purpose, rerun scripts/gen_vectors.py and let the
TypeScript side follow; the vectors are never rewritten by a test.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from turnkeeper import _caller_assertion as caller_assertion
from turnkeeper import _graph_versions as graph_versions
from turnkeeper import _nats_identity as nats_identity
from turnkeeper import states
from turnkeeper.agent._fingerprint import GraphVersion
from turnkeeper.agent.bridge import _intent as intent
from turnkeeper.agent.bridge._idempotency import idempotency_key

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "vectors"


def effect_key(given: dict[str, Any]) -> dict[str, Any]:
    # The generator's own adapter from a vector's fields to a CallSite.
    return {"key": _generator().effect_key(given)}


def step_key(given: dict[str, Any]) -> dict[str, Any]:
    return {"key": idempotency_key(given["config"])}


def keys_of_token(given: dict[str, Any]) -> dict[str, Any]:
    digest = caller_assertion.token_digest(given["token"])
    key = caller_assertion.key_of(digest)
    return {"digest": digest, "key_hex": key.hex(), "key_id": caller_assertion.key_id(key)}


def _keys(tokens: list[str]) -> list[bytes]:
    return [caller_assertion.key_of(caller_assertion.token_digest(t)) for t in tokens]


def signature(given: dict[str, Any]) -> dict[str, Any]:
    fields = given["assertion"]
    assertion = caller_assertion.CallerAssertion(
        agent=fields["agent"],
        method=fields["method"],
        request_id=fields["request_id"],
        name=fields["name"],
        role=fields["role"],
        caller_agent=fields["caller_agent"],
        methods=tuple(fields["methods"]),
        expires_at=fields["expires_at"],
    )
    return {"header": caller_assertion.sign(assertion, _keys(given["tokens"]))}


def verification(given: dict[str, Any]) -> dict[str, Any]:
    try:
        found = caller_assertion.verify(
            given["header"],
            _keys(given["tokens"]),
            agent=given["agent"],
            method=given["method"],
            request_id=given["request_id"],
            now=given["now"],
        )
    except caller_assertion.AssertionRefused as exc:
        return {"refused": str(exc)}
    return {
        "assertion": {
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
    }


def nats_user(given: dict[str, Any]) -> dict[str, Any]:
    found = nats_identity.identity_of(given["token"])
    return {"user": found.user, "password": found.password, "inbox_prefix": found.inbox_prefix}


def canonical_text(given: dict[str, Any]) -> dict[str, Any]:
    return {"text": graph_versions.canonical(given["value"])}


def graph_fingerprint(given: dict[str, Any]) -> dict[str, Any]:
    return {"fingerprint": graph_versions.fingerprint(given["shape"], given["label"])}


def graph_stamp(given: dict[str, Any]) -> dict[str, Any]:
    shape, label = given["shape"], given["label"]
    version = GraphVersion(shape, label, graph_versions.fingerprint(shape, label))
    return {"stamp": version.stamp(given["checkpoint"]).to_json()}


def run_intent(given: dict[str, Any]) -> dict[str, Any]:
    journaled = given["journaled"]
    return {
        "regenerate": intent.is_regenerate(journaled),
        "reserved": intent.is_reserved(journaled),
        "run": None if (run := intent.run_intent(journaled)) is None else run.journaled(),
    }


@functools.cache
def _generator() -> Any:
    """scripts/gen_vectors.py as a module: its `captured` drives EventCapture with a
    vector's script of callbacks (the same driving as the expected events came from;
    what is checked is that EventCapture still emits them)."""
    spec = importlib.util.spec_from_file_location(
        "gen_vectors", ROOT / "scripts" / "gen_vectors.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def captured_events(given: dict[str, Any]) -> dict[str, Any]:
    return {"events": _generator().captured(given["callbacks"])}


def turn_state(given: dict[str, Any]) -> dict[str, Any]:
    if "proto" in given:
        state = states.TurnState.from_proto(given["proto"])
        return {
            "name": state.value,
            "word": state.word,
            "contract_word": state.contract_word,
            "live": state.live,
        }
    if "answer" in given:
        return {"name": states.TurnState.from_answer(given["answer"]).value}
    return {"terminal_event_types": sorted(states.TERMINAL_EVENT_TYPES)}


RULES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "effect_keys.json": effect_key,
    "step_keys.json": step_key,
    "caller_assertion_keys.json": keys_of_token,
    "caller_assertion_signatures.json": signature,
    "caller_assertion_verifications.json": verification,
    "nats_identities.json": nats_user,
    "canonical_json.json": canonical_text,
    "graph_fingerprints.json": graph_fingerprint,
    "graph_stamps.json": graph_stamp,
    "run_intents.json": run_intent,
    "turn_states.json": turn_state,
    "captured_events.json": captured_events,
}


def cases() -> list[Any]:
    found = []
    for file in sorted(RULES):
        document = json.loads((VECTORS / file).read_text(encoding="utf-8"))
        for number, case in enumerate(document["cases"]):
            found.append(pytest.param(file, case, id=f"{file}[{number}] {case['name']}"))
    return found


@pytest.mark.parametrize(("file", "case"), cases())
def test_the_python_client_computes_what_the_vector_says(file: str, case: dict[str, Any]) -> None:
    assert RULES[file](case["input"]) == case["expected"]


def test_every_vector_file_is_read_by_this_test() -> None:
    assert sorted(p.name for p in VECTORS.glob("*.json")) == sorted(RULES)


def test_the_committed_vectors_are_what_the_generator_writes() -> None:
    # --check compares and writes nothing: a case added to the generator but not
    # committed (or edited by hand) fails here.
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_vectors.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
