"""Fuzzing every RPC of both services with hypothesis: random and malformed messages
(built from the proto descriptors, so a new field or RPC is fuzzed too), raw bytes
that are no message at all, and random metadata (no token, garbage tokens, each role,
stray headers).

Each RPC must answer every request with a status a client can act on: never
INTERNAL, UNKNOWN (an exception nobody mapped), DATA_LOSS or UNAVAILABLE (storage
trouble), and the service must stay up. After each RPC's run, `PRAGMA
integrity_check` is ok on both files and the turns seeded before are unchanged.

Tokens that may change turns (admin, operator, agent:alpha) only ever name fuzz ids
and finished seeds; the live seeds (alpha's RUNNING and PARKED turns) are aimed at
with tokens that must not be able to touch them: none, garbage, panel and agent:beta.

CI runs TURNKEEPER_FUZZ_EXAMPLES (default 50) examples per RPC; raise it for a long run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import string
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor, struct_pb2
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from turnkeeper.v1 import checkpoints_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer, create_server

from tests.support.security import bearer, write_tokens
from tests.support.service import make_settings
from tests.support.turns import value

EXAMPLES = int(os.environ.get("TURNKEEPER_FUZZ_EXAMPLES", "50"))
pytestmark = [
    pytest.mark.timeout(max(120, EXAMPLES * 3)),
    # Hypothesis warns when the global `random` state changes during a draw, taking
    # it for a strategy that uses `random`. These strategies use none; what changes
    # it is other threads of this pytest worker: the session's shared deployments
    # (tests/support/deployment.py) run on their own threads throughout, and their
    # psycopg pool draws jitter from the global `random` when it opens a connection
    # (psycopg_pool/base.py, `_jitter`), their NATS client shuffles its servers, their
    # graphs' checkpoint ids take random bits. Found by recording every call into
    # `random` off the main thread over a whole run of the suite (stop 66's note).
    pytest.mark.filterwarnings(
        "ignore:Do not use the `random` module inside strategies"
        ":hypothesis.errors.HypothesisDeprecationWarning"
    ),
]

# Codes that mean the service failed, not the request.
FAILURES = {
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.DATA_LOSS,
    grpc.StatusCode.UNAVAILABLE,
}

LIVE_SEEDS = ("t-run", "t-park")
FINISHED_SEEDS = ("t-done", "t-fail")
SEED_THREADS = {"t-run": "th-run", "t-park": "th-park", "t-done": "th-done", "t-fail": "th-fail"}
# Strings that reach the live seeds: a privileged token never sends them.
LIVE_STRINGS = frozenset(
    {*LIVE_SEEDS, "th-run", "th-park", "alpha", "r1", "i1", "r-park", "i-park"}
)

# Methods that delete a thread's rows or checkpoints when a privileged caller asks.
ERASING = frozenset({"DeleteThread", "PruneThreads", "DeleteForRuns", "CopyThread"})
SEED_STRINGS = LIVE_STRINGS | {*FINISHED_SEEDS, "th-done", "th-fail"}


def _services() -> list[tuple[str, descriptor.MethodDescriptor, Any]]:
    out = []
    for module, name in ((turns_pb2, "TurnService"), (checkpoints_pb2, "CheckpointService")):
        service = module.DESCRIPTOR.services_by_name[name]
        for method in service.methods:
            request_class = getattr(module, method.input_type.name)
            out.append((f"/{service.full_name}/{method.name}", method, request_class))
    return out


METHODS = _services()


# -- strategies ---------------------------------------------------------------------

ID_CHARS = string.ascii_letters + string.digits + "._:@/+=-"
PRINTABLE = "".join(chr(c) for c in range(0x20, 0x7F))


def strings(pool: tuple[str, ...]) -> st.SearchStrategy[str]:
    known = st.sampled_from(pool)
    return st.one_of(
        # Mostly ids that exist or are at least valid, so calls get past validation.
        known,
        known,
        known,
        st.text(alphabet=ID_CHARS, min_size=1, max_size=24),
        st.just(""),
        st.text(max_size=24),
        st.text(alphabet=ID_CHARS, min_size=1, max_size=24),
        st.text(alphabet=ID_CHARS, min_size=250, max_size=300),
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=16),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


def json_texts() -> st.SearchStrategy[str]:
    return st.one_of(
        json_values.map(json.dumps),
        st.sampled_from(["", "{", "NaN", "Infinity", "[1,]", '{"a":', "null", "{}", '"x"']),
        st.integers(1, 2000).map(lambda n: "[" * n + "]" * n),
        st.integers(1, 5000).map(lambda n: "[" * n),
        st.text(max_size=32),
    )


def proto_values() -> st.SearchStrategy[struct_pb2.Value]:
    nested = st.integers(1, 60).map(lambda depth: _nested(depth))
    numbers = (st.sampled_from([float("nan"), float("inf"), float("-inf")]) | st.floats()).map(
        _number
    )
    return st.one_of(json_values.map(value), nested, numbers, st.just(struct_pb2.Value()))


def _nested(depth: int) -> struct_pb2.Value:
    # Built by hand: json_format refuses to make what the server must refuse to take.
    v = struct_pb2.Value(string_value="leaf")
    for _ in range(depth):
        outer = struct_pb2.Value()
        outer.list_value.values.add().CopyFrom(v)
        v = outer
    return v


def _number(x: float) -> struct_pb2.Value:
    return struct_pb2.Value(number_value=x)


JSON_FIELDS = {"data_json", "metadata_json", "filter_json"}
F = descriptor.FieldDescriptor


def field_values(field: descriptor.FieldDescriptor, pool: tuple[str, ...], depth: int) -> Any:
    if field.type == F.TYPE_STRING:
        return json_texts() if field.name in JSON_FIELDS else strings(pool)
    if field.type == F.TYPE_BYTES:
        return st.binary(max_size=64)
    if field.type == F.TYPE_BOOL:
        return st.booleans()
    if field.type == F.TYPE_ENUM:
        return st.integers(-2, 8)  # proto3 enums are open: unknown numbers too
    if field.type in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
        return st.one_of(st.integers(-2, 8), st.integers(-(2**31), 2**31 - 1))
    if field.type in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64):
        return st.one_of(st.integers(-2, 8), st.integers(-(2**63), 2**63 - 1))
    if field.type in (F.TYPE_UINT64, F.TYPE_FIXED64):
        return st.one_of(st.integers(0, 8), st.integers(0, 2**64 - 1))
    if field.type == F.TYPE_MESSAGE:
        assert field.message_type is not None
        if field.message_type.full_name == "google.protobuf.Value":
            return proto_values()
        return messages(field.message_type, pool, depth + 1)
    raise AssertionError(f"no strategy for {field.full_name}")


def messages(
    message_type: descriptor.Descriptor, pool: tuple[str, ...], depth: int = 0
) -> st.SearchStrategy[dict[str, Any]]:
    """A dict of field name to value (or list of values); absent fields are unset."""
    fields = {}
    for field in message_type.fields:
        if depth > 2 and field.type == F.TYPE_MESSAGE:
            continue
        values = field_values(field, pool, depth)
        if field.is_repeated:
            values = st.lists(values, max_size=5)
        fields[field.name] = st.none() | values
    return st.fixed_dictionaries(fields)


def build(message_class: Any, fields: dict[str, Any]) -> Message:
    msg = message_class()
    _fill(msg, fields)
    return msg  # type: ignore[no-any-return]


def _fill(msg: Any, fields: dict[str, Any]) -> None:
    for name, v in fields.items():
        if v is None:
            continue
        field = msg.DESCRIPTOR.fields_by_name[name]
        if field.type == F.TYPE_MESSAGE:
            if field.is_repeated:
                for item in v:
                    _set_message(getattr(msg, name).add(), item)
            else:
                _set_message(getattr(msg, name), v)
        elif field.is_repeated:
            getattr(msg, name).extend(v)
        else:
            setattr(msg, name, v)


def _set_message(target: Any, v: Any) -> None:
    if isinstance(v, Message):
        target.CopyFrom(v)
    else:
        target.SetInParent()
        _fill(target, v)


RESERVED = {"content-type", "te", "host", "user-agent", "authorization", "grpc-timeout"}
header_names = st.from_regex(r"\A[a-z][a-z0-9_.-]{0,15}\Z").filter(
    lambda k: k not in RESERVED and not k.startswith("grpc-") and not k.endswith("-bin")
)
header_values = st.text(alphabet=PRINTABLE, max_size=40).map(str.strip)


@dataclass(frozen=True)
class Who:
    name: str
    privileged: bool


@st.composite
def callers(draw: st.DrawFn, tokens: dict[str, str]) -> tuple[Who, list[tuple[str, str]]]:
    """Who calls, and the metadata of the call."""
    kind = draw(
        st.sampled_from(["none", "garbage", "shape", "panel", "beta", "alpha", "operator", "admin"])
    )
    metadata: list[tuple[str, str]] = []
    if kind == "garbage":
        token = draw(st.text(alphabet=PRINTABLE, min_size=1, max_size=60).map(str.strip))
        metadata.append(("authorization", f"Bearer {token}"))
    elif kind == "shape":
        metadata.append(("authorization", draw(header_values)))
    elif kind != "none":
        scheme = draw(st.sampled_from(["Bearer", "bearer", "BEARER"]))
        metadata.append(("authorization", f"{scheme} {tokens[kind]}"))
    metadata.extend(draw(st.lists(st.tuples(header_names, header_values), max_size=3)))
    return Who(kind, kind in ("alpha", "operator", "admin")), metadata


# -- the service, on a loop of its own (hypothesis drives it from sync tests) ---------


@dataclass
class Fuzzed:
    server: TurnkeeperServer
    loop: asyncio.AbstractEventLoop
    channel: grpc.Channel
    tokens: dict[str, str]
    data_dir: Path

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60)


def _seed(channel: grpc.Channel, admin: Any) -> None:
    def unary(path: str, request: Message) -> None:
        channel.unary_unary(
            path,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=lambda b: b,
        )(request, metadata=admin, timeout=10)

    t = "/turnkeeper.v1.TurnService/"
    for turn_id, thread_id in SEED_THREADS.items():
        replica, incarnation = ("r1", "i1") if turn_id == "t-run" else ("r-park", "i-park")
        unary(
            t + "StartTurn",
            turns_pb2.StartTurnRequest(
                turn_id=turn_id,
                thread_id=thread_id,
                agent="alpha",
                input=value({"q": turn_id}),
                replica=replica,
                incarnation=incarnation,
            ),
        )
        unary(
            t + "AppendEvents",
            turns_pb2.AppendEventsRequest(
                turn_id=turn_id,
                attempt=0,
                events=[turns_pb2.EventInput(seq=1, type="step", data_json='{"n":1}')],
            ),
        )
        unary(
            "/turnkeeper.v1.CheckpointService/PutCheckpoint",
            checkpoints_pb2.PutCheckpointRequest(
                thread_id=thread_id,
                checkpoint_id="c1",
                checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
                metadata_json="{}",
                fence=checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=0),
            ),
        )
    unary(t + "ParkTurn", turns_pb2.ParkTurnRequest(turn_id="t-park", interrupt=value("ok?")))
    unary(
        t + "FinishTurn",
        turns_pb2.FinishTurnRequest(turn_id="t-done", outcome=turns_pb2.OUTCOME_DONE),
    )
    unary(
        t + "FinishTurn",
        turns_pb2.FinishTurnRequest(turn_id="t-fail", outcome=turns_pb2.OUTCOME_FAILED, error="x"),
    )


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fuzzed]:
    data_dir = tmp_path_factory.mktemp("fuzz")
    tokens = write_tokens(data_dir / "tokens.jsonl")
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="fuzzed-service", daemon=True)
    thread.start()
    settings_ = make_settings(
        data_dir,
        tokens_file=data_dir / "tokens.jsonl",
        # Nothing expires during the run: the seeds change only if a call changes them.
        lease_seconds=3600.0,
        claim_seconds=3600.0,
        reap_interval=3600.0,
        # Fuzz speed; durability is not what is under test here.
        synchronous="NORMAL",
    )
    server = asyncio.run_coroutine_threadsafe(create_server(settings_), loop).result(30)
    channel = grpc.insecure_channel(server.address)
    env = Fuzzed(server, loop, channel, tokens, data_dir)
    try:
        _seed(channel, bearer(tokens["admin"]))
        yield env
    finally:
        channel.close()
        env.run(server.stop(0))
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def snapshot(data_dir: Path) -> dict[str, Any]:
    """The seeded turns' rows, events and checkpoints, read from the files."""
    conn = sqlite3.connect(f"file:{data_dir / 'turns.db'}?mode=ro", uri=True)
    try:
        conn.execute(f"ATTACH 'file:{data_dir / 'sessions.db'}?mode=ro' AS sessions")
        ids = list(SEED_THREADS)
        marks = ",".join("?" * len(ids))
        return {
            "turns": conn.execute(
                f"SELECT * FROM main.turns WHERE turn_id IN ({marks}) ORDER BY turn_id", ids
            ).fetchall(),
            "events": conn.execute(
                f"SELECT * FROM main.events WHERE turn_id IN ({marks}) ORDER BY turn_id, seq", ids
            ).fetchall(),
            "checkpoints": conn.execute(
                "SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint, metadata "
                "FROM sessions.checkpoints WHERE thread_id IN ('th-run', 'th-park') "
                "ORDER BY thread_id, checkpoint_id"
            ).fetchall(),
        }
    finally:
        conn.close()


def integrity(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()


def call(env: Fuzzed, path: str, streaming: bool, payload: bytes, metadata: Any) -> grpc.StatusCode:
    identity: dict[str, Any] = {"request_serializer": None, "response_deserializer": None}
    try:
        if streaming:
            # WatchTurn of a live turn never ends by itself: a short deadline ends it.
            stream: Any = env.channel.unary_stream(path, **identity)(
                payload, metadata=metadata, timeout=0.3
            )
            for n, _ in enumerate(stream):
                if n >= 50:
                    stream.cancel()
                    break
        else:
            env.channel.unary_unary(path, **identity)(payload, metadata=metadata, timeout=10)
    except grpc.RpcError as exc:
        code: grpc.StatusCode = exc.code()
        return code
    return grpc.StatusCode.OK


@pytest.mark.parametrize(
    ("path", "method", "request_class"), METHODS, ids=[m[1].name for m in METHODS]
)
def test_fuzz_rpc(
    fuzzed: Fuzzed, path: str, method: descriptor.MethodDescriptor, request_class: Any
) -> None:
    before = snapshot(fuzzed.data_dir)
    privileged_pool: tuple[str, ...] = (
        *FINISHED_SEEDS,
        "th-done",
        "th-fail",
        "beta",
        "fuzz-agent",
        "c1",
        "x",
    )
    open_pool = (*privileged_pool, *LIVE_SEEDS, "th-run", "th-park", "alpha", "r1", "i1")
    if method.name in ERASING:
        # Erasure and pruning delete what a privileged caller names, finished turns
        # included, by design: fuzzed with names of no seed.
        privileged_pool = ("beta", "fuzz-agent", "c1", "x")
    message_for = {
        True: messages(method.input_type, privileged_pool),
        False: messages(method.input_type, open_pool),
    }

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.filter_too_much,
            HealthCheck.function_scoped_fixture,
        ],
    )
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        who, metadata = data.draw(callers(fuzzed.tokens), label="caller")
        if data.draw(st.integers(0, 9), label="raw?") == 0:
            payload = data.draw(st.binary(max_size=120), label="raw bytes")
        else:
            fields = data.draw(message_for[who.privileged], label="fields")
            request = build(request_class, fields)
            if who.privileged:
                # Belt and braces: nothing a privileged token sends names a live seed
                # (nor, to an erasing method, any seed).
                text = str(request)
                guarded = SEED_STRINGS if method.name in ERASING else LIVE_STRINGS
                if any(s in text for s in guarded):
                    return
            payload = request.SerializeToString()
        code = call(fuzzed, path, method.server_streaming, payload, metadata)
        assert code not in FAILURES, f"{method.name} as {who.name}: {code.name}"
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            assert method.server_streaming, f"{method.name} as {who.name} timed out"

    fuzz()

    health = health_pb2_grpc.HealthStub(fuzzed.channel)
    assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == (
        health_pb2.HealthCheckResponse.SERVING
    )
    assert integrity(fuzzed.data_dir / "turns.db") == "ok"
    assert integrity(fuzzed.data_dir / "sessions.db") == "ok"
    assert snapshot(fuzzed.data_dir) == before, f"fuzzing {method.name} changed a seeded turn"
