"""Unit tests of the client's pieces that need no service: the status-code mapping,
connection options, and RemoteSaver's SqliteSaver-compatible encodings."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import grpc
import grpc.aio
import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, empty_checkpoint
from langgraph.checkpoint.serde.types import ERROR, INTERRUPT
from langgraph.checkpoint.sqlite import SqliteSaver
from turnkeeper import errors
from turnkeeper.agent.saver import (
    DURABILITY,
    RemoteSaver,
    durable_config,
    durable_run_kwargs,
)
from turnkeeper.agent.saver import (
    _wire as wire,
)
from turnkeeper.client import ConnectionOptions, default_address

MAPPED: list[tuple[grpc.StatusCode, type[errors.TurnkeeperError]]] = [
    (grpc.StatusCode.NOT_FOUND, errors.TurnNotFound),
    (grpc.StatusCode.FAILED_PRECONDITION, errors.WrongState),
    (grpc.StatusCode.ALREADY_EXISTS, errors.AlreadyExists),
    (grpc.StatusCode.ABORTED, errors.StaleAttempt),
    (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidArgument),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.ResourceExhausted),
    (grpc.StatusCode.UNAVAILABLE, errors.Unavailable),
    (grpc.StatusCode.UNAUTHENTICATED, errors.Unauthenticated),
    (grpc.StatusCode.PERMISSION_DENIED, errors.PermissionDenied),
]


def aio_error(code: grpc.StatusCode, details: str | None) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details, None)


class SyncCallError(grpc.RpcError, grpc.Call):  # type: ignore[misc]
    """What a blocking stub raises: an RpcError that is also a Call."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code = code
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(("code", "cls"), MAPPED)
def test_aio_error_maps_to_its_class(
    code: grpc.StatusCode, cls: type[errors.TurnkeeperError]
) -> None:
    err = errors.from_rpc_error(aio_error(code, "turn t1 is RUNNING"), rpc="ResumeDetached")
    assert type(err) is cls
    assert err.code is code
    assert err.message == "turn t1 is RUNNING"
    assert err.rpc == "ResumeDetached"
    assert str(err) == f"ResumeDetached: {code.name}: turn t1 is RUNNING"


@pytest.mark.parametrize(("code", "cls"), MAPPED)
def test_sync_error_maps_to_its_class(
    code: grpc.StatusCode, cls: type[errors.TurnkeeperError]
) -> None:
    err = errors.from_rpc_error(SyncCallError(code, "why"))
    assert type(err) is cls
    assert (err.code, err.message, err.rpc) == (code, "why", None)


@pytest.mark.parametrize(
    "code",
    [
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNIMPLEMENTED,
    ],
)
def test_unmapped_codes_give_the_base_class(code: grpc.StatusCode) -> None:
    err = errors.from_rpc_error(aio_error(code, "x"))
    assert type(err) is errors.TurnkeeperError
    assert err.code is code


def test_missing_details_fall_back_to_the_code_name() -> None:
    err = errors.from_rpc_error(aio_error(grpc.StatusCode.UNAVAILABLE, None))
    assert err.message == "UNAVAILABLE"


def test_bare_rpc_error_is_unknown() -> None:
    err = errors.from_rpc_error(grpc.RpcError())
    assert type(err) is errors.TurnkeeperError
    assert err.code is grpc.StatusCode.UNKNOWN


def test_every_class_is_a_turnkeeper_error_and_invalid_argument_a_value_error() -> None:
    assert all(issubclass(cls, errors.TurnkeeperError) for _, cls in MAPPED)
    assert len({cls for _, cls in MAPPED}) == len(MAPPED)
    # As SqliteSaver raises ValueError for a bad filter key.
    assert issubclass(errors.InvalidArgument, ValueError)


# Connection options


def test_default_address_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNKEEPER_ADDRESS", raising=False)
    assert default_address() == "127.0.0.1:50051"
    assert ConnectionOptions().target == "127.0.0.1:50051"
    monkeypatch.setenv("TURNKEEPER_ADDRESS", "turnkeeper:6000")
    assert ConnectionOptions().target == "turnkeeper:6000"
    monkeypatch.setenv("TURNKEEPER_ADDRESS", "")
    assert ConnectionOptions().target == "127.0.0.1:50051"


def test_options_validate() -> None:
    with pytest.raises(ValueError, match="together"):
        ConnectionOptions(client_certificate="cert.pem")
    with pytest.raises(ValueError, match="at least 1"):
        ConnectionOptions(retry_max_attempts=0)
    with pytest.raises(ValueError, match="default_timeout"):
        ConnectionOptions(default_timeout=0)


def test_plaintext_unless_tls_or_certificates() -> None:
    assert ConnectionOptions().credentials() is None
    assert ConnectionOptions(tls=True).secure
    assert ConnectionOptions(root_certificates="ca.pem").secure


def test_bearer_token_goes_in_call_metadata() -> None:
    assert ConnectionOptions().call_metadata() == ()
    assert ConnectionOptions(bearer_token="s3cret").call_metadata() == (
        ("authorization", "Bearer s3cret"),
    )


def test_retry_policy_covers_exactly_the_idempotent_rpcs() -> None:
    config = json.loads(ConnectionOptions().service_config())
    [method_config] = config["methodConfig"]
    retried = {(n["service"].rsplit(".", 1)[1], n["method"]) for n in method_config["name"]}
    assert retried == {
        ("TurnService", "StartTurn"),
        ("TurnService", "TurnStatus"),
        ("TurnService", "GetTurn"),
        ("TurnService", "ListTurns"),
        ("TurnService", "ListEvents"),
        ("TurnService", "ListAgents"),
        ("TurnService", "AppendEvents"),
        ("TurnService", "ListEffects"),
        ("TurnService", "RecordEffect"),
        ("CheckpointService", "GetCheckpoint"),
        ("CheckpointService", "ListCheckpoints"),
        ("CheckpointService", "PutCheckpoint"),
        ("CheckpointService", "PutWrites"),
    }
    policy = method_config["retryPolicy"]
    assert policy["retryableStatusCodes"] == ["UNAVAILABLE"]
    assert policy["maxAttempts"] == 5
    assert policy["initialBackoff"] == "0.1s"
    assert policy["maxBackoff"] == "2s"


def test_one_attempt_disables_retries() -> None:
    config = json.loads(ConnectionOptions(retry_max_attempts=1).service_config())
    assert config["methodConfig"] == []


# RemoteSaver encodings, compared with SqliteSaver's (no service needed: the saver
# connects lazily).


@pytest.fixture
def sqlite_saver() -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(":memory:") as saver:
        yield saver


@pytest.fixture
def remote_saver() -> Iterator[RemoteSaver]:
    with RemoteSaver.from_address("127.0.0.1:1") as saver:
        yield saver


@pytest.mark.parametrize("current", [None, 1, 41, "00000000000000000000000000000007.0.5"])
def test_next_version_is_sqlite_savers(
    remote_saver: RemoteSaver, sqlite_saver: SqliteSaver, current: Any
) -> None:
    random.seed(1234)
    ours = remote_saver.get_next_version(current, None)
    random.seed(1234)
    theirs = sqlite_saver.get_next_version(current, None)
    assert ours == theirs


def test_next_version_format_and_order(remote_saver: RemoteSaver) -> None:
    first = remote_saver.get_next_version(None, None)
    assert first.startswith("0" * 31 + "1.")
    assert len(first.split(".")[0]) == 32
    versions = [first]
    for _ in range(12):
        versions.append(remote_saver.get_next_version(versions[-1], None))
    assert all(len(v.split(".")[0]) == 32 for v in versions)
    assert versions == sorted(versions)
    assert int(versions[-1].split(".")[0]) == 13


def test_put_request_matches_sqlite_savers_row(
    remote_saver: RemoteSaver, sqlite_saver: SqliteSaver
) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"messages": ["héllo"]}
    config = durable_config("th-1", turn_id="turn-1", attempt=2)
    config["configurable"]["checkpoint_ns"] = ""
    config["configurable"]["checkpoint_id"] = "parent-id"
    config["configurable"]["user"] = "zoë\u0000"
    metadata: Any = {"source": "loop", "step": 3, "parents": {}, "note": "ünïcode \ud800"}

    request, stored = wire.put_request(remote_saver.serde, config, checkpoint, metadata)
    returned = sqlite_saver.put(config, checkpoint, metadata, {})

    assert stored == returned
    row = sqlite_saver.conn.execute(
        "SELECT parent_checkpoint_id, type, checkpoint, metadata FROM checkpoints"
    ).fetchone()
    assert request.parent_checkpoint_id == row[0] == "parent-id"
    assert (request.checkpoint.type, request.checkpoint.data) == (row[1], row[2])
    assert request.metadata_json.encode("utf-8") == row[3]
    assert json.loads(request.metadata_json)["turn_id"] == "turn-1"
    assert (request.fence.turn_id, request.fence.attempt) == ("turn-1", 2)


def test_put_request_without_turn_is_not_fenced(remote_saver: RemoteSaver) -> None:
    config = durable_config("th-1")
    config["configurable"]["checkpoint_ns"] = "child:1"
    request, stored = wire.put_request(remote_saver.serde, config, empty_checkpoint(), {})
    assert not request.HasField("fence")
    assert request.parent_checkpoint_id == ""
    assert stored["configurable"]["checkpoint_ns"] == "child:1"


@pytest.mark.parametrize(
    ("writes", "replace"),
    [
        ([("a", 1), ("b", 2)], False),
        ([(ERROR, "boom"), (INTERRUPT, {"q": 1})], True),
        ([(ERROR, "boom"), ("a", 1)], False),
    ],
)
def test_writes_request_uses_sqlite_savers_idx_and_replace(
    remote_saver: RemoteSaver, writes: list[tuple[str, Any]], replace: bool
) -> None:
    config = durable_config("th-1", "turn-1", 0)
    config["configurable"].update(checkpoint_ns="", checkpoint_id="cp-1")
    request = wire.writes_request(remote_saver.serde, config, writes, "task-1", "~path")
    assert request.replace is replace
    assert [w.idx for w in request.writes] == [
        WRITES_IDX_MAP.get(channel, i) for i, (channel, _) in enumerate(writes)
    ]
    assert [w.channel for w in request.writes] == [channel for channel, _ in writes]
    assert (request.task_id, request.task_path, request.checkpoint_id) == (
        "task-1",
        "~path",
        "cp-1",
    )
    # attempt 0 (the first execution) is a real fence, not "unset".
    assert request.HasField("fence")
    assert (request.fence.turn_id, request.fence.attempt) == ("turn-1", 0)


def test_list_request_mirrors_sqlite_savers_where_clause() -> None:
    request = wire.list_request(None, None, None, None)
    assert request is not None
    assert request.thread_id == ""
    assert not request.HasField("checkpoint_ns")

    config = durable_config("th-1")
    config["configurable"]["checkpoint_ns"] = ""
    before: RunnableConfig = {"configurable": {"checkpoint_id": "cp-9"}}
    request = wire.list_request(config, {"source": "input", "step": 1}, before, 3)
    assert request is not None
    assert request.thread_id == "th-1"
    assert request.HasField("checkpoint_ns")
    assert request.checkpoint_ns == ""
    assert json.loads(request.filter_json) == {"source": "input", "step": 1}
    assert request.before_checkpoint_id == "cp-9"
    assert request.limit == 3

    # SQLite's LIMIT 0 returns nothing; a negative LIMIT is no limit.
    assert wire.list_request(config, None, None, 0) is None
    # `checkpoint_id < NULL` matches nothing either.
    assert wire.list_request(config, None, {"configurable": {}}, None) is None
    negative = wire.list_request(config, None, None, -1)
    assert negative is not None
    assert negative.limit == 0


def test_durable_config_and_kwargs() -> None:
    assert durable_config("th") == {"configurable": {"thread_id": "th"}}
    assert durable_config("th", "t1", 0) == {
        "configurable": {"thread_id": "th", "turn_id": "t1", "attempt": 0}
    }
    with pytest.raises(ValueError, match="together"):
        durable_config("th", turn_id="t1")
    with pytest.raises(ValueError, match="together"):
        durable_config("th", attempt=1)
    assert DURABILITY == "sync"
    assert durable_run_kwargs() == {"durability": "sync"}


def test_close_is_safe_twice() -> None:
    saver = RemoteSaver("127.0.0.1:1")
    saver.close()
    saver.close()
    with pytest.raises(RuntimeError, match="closed"):
        saver.get_tuple(durable_config("th"))
