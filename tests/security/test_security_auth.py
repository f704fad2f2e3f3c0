"""Bearer tokens and roles: every RPC of both services called with no token, a wrong
token and each role, against the expected code; nothing about another agent's turns
leaks through a refusal. A real service on port 0 with a real tokens file, one per
backend that the module's tests share (each seeds turns and threads of ids of its
own); the test that reads the audit log has a service of its own."""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from google.protobuf import message
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.security import auth

from tests.support.postgres import PostgresCluster
from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory, unrenewed
from tests.support.service_thread import ServiceThread
from tests.support.turns import events, value

if TYPE_CHECKING:
    from turnkeeper.v1.checkpoints_pb2_grpc import CheckpointServiceAsyncStub
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub

pytestmark = [pytest.mark.timeout(60), pytest.mark.both_backends]

OK = grpc.StatusCode.OK
UNAUTH = grpc.StatusCode.UNAUTHENTICATED
DENIED = grpc.StatusCode.PERMISSION_DENIED
NOT_FOUND = grpc.StatusCode.NOT_FOUND
ABORTED = grpc.StatusCode.ABORTED
PRECONDITION = grpc.StatusCode.FAILED_PRECONDITION
INVALID = grpc.StatusCode.INVALID_ARGUMENT

STALE = 7  # an attempt no execution holds: fenced writes pass auth, then ABORTED


def start_request(agent: str, replica: str, incarnation: str) -> turns_pb2.StartTurnRequest:
    """A turn of `agent` on a thread of its own, both of ids of their own (the
    module's tests share a service)."""
    unique = uuid.uuid4().hex[:12]
    return turns_pb2.StartTurnRequest(
        turn_id=f"t-{agent}-{unique}",
        thread_id=f"th-{agent}-{unique}",
        agent=agent,
        input=value({"q": "hello"}),
        replica=replica,
        incarnation=incarnation,
    )


@dataclass
class Env:
    channel: aio.Channel
    tokens: dict[str, str]
    turns: TurnServiceAsyncStub
    checkpoints: CheckpointServiceAsyncStub
    # The test's seeded turns: alpha's (t-alpha-*, th-alpha-*) and beta's.
    alpha: turns_pb2.StartTurnRequest
    beta: turns_pb2.StartTurnRequest


class SharedServices:
    """The module's service on each backend, with the tokens file, started by the
    first test that asks for it (`ServiceThread`)."""

    def __init__(self, data_dir: Path) -> None:
        self._data_dir = data_dir
        self.tokens = write_tokens(data_dir / "tokens.jsonl")
        self._started: dict[str, ServiceThread] = {}

    def address(self, backend: str, database_url: Callable[[], str | None]) -> str:
        service = self._started.get(backend)
        if service is None:
            data_dir = self._data_dir / backend
            data_dir.mkdir()
            # A long lease, so the reaper never re-drives a test's seeded turns mid-test.
            service = ServiceThread(
                data_dir,
                tokens_file=self._data_dir / "tokens.jsonl",
                database_url=database_url(),
                **unrenewed(),
            )
            service.start()
            self._started[backend] = service
        return service.address

    def stop(self) -> None:
        for service in self._started.values():
            service.stop()


@pytest.fixture(scope="module")
def shared_services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServices]:
    services = SharedServices(tmp_path_factory.mktemp("security-auth"))
    try:
        yield services
    finally:
        services.stop()


@asynccontextmanager
async def seeded(address: str, tokens: dict[str, str]) -> AsyncIterator[Env]:
    """A channel to the service at `address`, and two turns of ids of their own,
    each with an event and a checkpoint: alpha's and beta's."""
    async with aio.insecure_channel(address) as channel:
        e = Env(
            channel,
            tokens,
            turns_pb2_grpc.TurnServiceStub(channel),
            checkpoints_pb2_grpc.CheckpointServiceStub(channel),
            start_request("alpha", "r1", "i1"),
            start_request("beta", "r2", "i2"),
        )
        admin = bearer(tokens["admin"])
        for start in (e.alpha, e.beta):
            await e.turns.StartTurn(start, metadata=admin)
            await e.turns.AppendEvents(
                turns_pb2.AppendEventsRequest(
                    turn_id=start.turn_id, attempt=0, events=events(1, "step")
                ),
                metadata=admin,
            )
            await e.checkpoints.PutCheckpoint(
                checkpoints_pb2.PutCheckpointRequest(
                    thread_id=start.thread_id,
                    checkpoint_id="c1",
                    checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
                    metadata_json="{}",
                    fence=checkpoints_pb2.TurnFence(turn_id=start.turn_id, attempt=0),
                ),
                metadata=admin,
            )
        yield e


@pytest.fixture
async def env(
    shared_services: SharedServices, backend: str, request: pytest.FixtureRequest
) -> AsyncIterator[Env]:
    """Seeded turns on the module's shared service of the test's backend."""

    def database_url() -> str | None:
        if backend != "postgres":
            return None
        cluster: PostgresCluster = request.getfixturevalue("postgres_cluster")
        return cluster.new_database()

    address = shared_services.address(backend, database_url)
    async with seeded(address, shared_services.tokens) as e:
        yield e


@pytest.fixture
async def audited(
    make_service: ServiceFactory, tmp_path: Path
) -> AsyncIterator[tuple[Env, TurnkeeperServer]]:
    """Seeded turns on a service of the test's own, whose audit log it reads."""
    tokens = write_tokens(tmp_path / "tokens.jsonl")
    server = await make_service(tokens_file=tmp_path / "tokens.jsonl", **unrenewed())
    async with seeded(server.address, tokens) as e:
        yield e, server


async def invoke(
    channel: aio.Channel, path: str, request: message.Message, metadata: Any
) -> tuple[grpc.StatusCode, str, list[Any]]:
    """Call any method by path; (code, details, responses). Streams: the first frame."""
    response_type = _RESPONSES[path]
    streaming = path.endswith(("/WatchTurn", "/ListCheckpoints", "/CheckpointStream"))
    if streaming:
        call = channel.unary_stream(
            path,
            request_serializer=type(request).SerializeToString,
            response_deserializer=response_type.FromString,
        )(request, metadata=metadata)
        try:
            first = await asyncio.wait_for(call.read(), 5)
        except aio.AioRpcError as exc:
            return exc.code(), exc.details() or "", []
        finally:
            call.cancel()
        if isinstance(first, checkpoints_pb2.CheckpointStreamResponse) and first.HasField("error"):
            # A message refused on CheckpointStream: the stream goes on, and the
            # refusal is that of the unary call.
            return _CODES[first.error.code], first.error.message, []
        return OK, "", [first] if isinstance(first, message.Message) else []
    unary = channel.unary_unary(
        path,
        request_serializer=type(request).SerializeToString,
        response_deserializer=response_type.FromString,
    )
    try:
        return OK, "", [await unary(request, metadata=metadata, timeout=10)]
    except aio.AioRpcError as exc:
        return exc.code(), exc.details() or "", []


def _methods() -> dict[str, tuple[type[message.Message], type[message.Message]]]:
    out = {}
    for module, service in ((turns_pb2, "TurnService"), (checkpoints_pb2, "CheckpointService")):
        descriptor = module.DESCRIPTOR.services_by_name[service]
        for m in descriptor.methods:
            out[f"/{descriptor.full_name}/{m.name}"] = (
                getattr(module, m.input_type.name),
                getattr(module, m.output_type.name),
            )
    return out


METHODS = _methods()
_RESPONSES = {path: response for path, (_, response) in METHODS.items()}
_CODES = {code.value[0]: code for code in grpc.StatusCode}
T = "/turnkeeper.v1.TurnService/"
C = "/turnkeeper.v1.CheckpointService/"


def fence(turn_id: str, attempt: int = STALE) -> checkpoints_pb2.TurnFence:
    return checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=attempt)


def effect_call(turn_id: str) -> turns_pb2.EffectCall:
    return turns_pb2.EffectCall(
        turn_id=turn_id,
        attempt=STALE,
        key="k1",
        name="send",
        args_json="{}",
        policy=turns_pb2.EFFECT_POLICY_RETRY,
    )


# One request per case, aimed at agent alpha's seeded turn and thread (`a`, its
# StartTurnRequest) or at the turn `t`, chosen so an authorised call changes nothing: a replayed StartTurn, fenced writes with a
# stale attempt, a resume of a turn that is not parked, a re-drive of a live lease.
CASES: dict[str, tuple[str, Callable[[turns_pb2.StartTurnRequest, str], message.Message]]] = {
    "StartTurn": (T + "StartTurn", lambda a, t: copy.deepcopy(a)),
    "TurnStatus": (T + "TurnStatus", lambda a, t: turns_pb2.TurnStatusRequest(turn_id=t)),
    "GetTurn": (T + "GetTurn", lambda a, t: turns_pb2.GetTurnRequest(turn_id=t)),
    "ListTurns": (T + "ListTurns", lambda a, t: turns_pb2.ListTurnsRequest(agent="alpha")),
    "ListEvents": (T + "ListEvents", lambda a, t: turns_pb2.ListEventsRequest(turn_id=t)),
    "Heartbeat": (
        T + "Heartbeat",
        lambda a, t: turns_pb2.HeartbeatRequest(
            turn_id=t, attempt=STALE, replica="r1", incarnation="i1"
        ),
    ),
    "AppendEvents": (
        T + "AppendEvents",
        lambda a, t: turns_pb2.AppendEventsRequest(
            turn_id=t, attempt=STALE, events=events(2, "token")
        ),
    ),
    "ParkTurn": (
        T + "ParkTurn",
        lambda a, t: turns_pb2.ParkTurnRequest(turn_id=t, attempt=STALE, interrupt=value({"q": 1})),
    ),
    "FinishTurn": (
        T + "FinishTurn",
        lambda a, t: turns_pb2.FinishTurnRequest(
            turn_id=t, attempt=STALE, outcome=turns_pb2.OUTCOME_DONE
        ),
    ),
    "ResumeDetached": (
        T + "ResumeDetached",
        lambda a, t: turns_pb2.ResumeDetachedRequest(turn_id=t, resume=value(True)),
    ),
    "Redrive (operator form)": (
        T + "Redrive",
        lambda a, t: turns_pb2.RedriveRequest(turn_id=t),
    ),
    "Redrive (startup form)": (
        T + "Redrive",
        lambda a, t: turns_pb2.RedriveRequest(agent="alpha", replica="r9", incarnation="i9"),
    ),
    "ClaimTurn": (
        T + "ClaimTurn",
        lambda a, t: turns_pb2.ClaimTurnRequest(
            turn_id=t, attempt=STALE, replica="r1", incarnation="i1"
        ),
    ),
    "WatchTurn": (T + "WatchTurn", lambda a, t: turns_pb2.WatchTurnRequest(turn_id=t)),
    # A reason over the limit: refused once authorised, so nothing is cancelled.
    "CancelTurn": (
        T + "CancelTurn",
        lambda a, t: turns_pb2.CancelTurnRequest(turn_id=t, reason="x" * 1001),
    ),
    # The effect ledger: a stale attempt's begin and record change nothing.
    "BeginEffect": (
        T + "BeginEffect",
        lambda a, t: turns_pb2.BeginEffectRequest(call=effect_call(t), record_intent=True),
    ),
    "RecordEffect": (
        T + "RecordEffect",
        lambda a, t: turns_pb2.RecordEffectRequest(
            call=effect_call(t), state=turns_pb2.EFFECT_STATE_DONE, outcome_json="1"
        ),
    ),
    "ListEffects": (T + "ListEffects", lambda a, t: turns_pb2.ListEffectsRequest(turn_id=t)),
    "ListAgents": (T + "ListAgents", lambda a, t: turns_pb2.ListAgentsRequest()),
    # A version no replica serves: refused once authorised.
    "MigrateTurns": (
        T + "MigrateTurns",
        lambda a, t: turns_pb2.MigrateTurnsRequest(
            agent="alpha", to_fingerprint="0" * 64, dry_run=True
        ),
    ),
    "GetCheckpoint": (
        C + "GetCheckpoint",
        lambda a, t: checkpoints_pb2.GetCheckpointRequest(thread_id=a.thread_id),
    ),
    "ListCheckpoints": (
        C + "ListCheckpoints",
        lambda a, t: checkpoints_pb2.ListCheckpointsRequest(thread_id=a.thread_id),
    ),
    "PutCheckpoint": (
        C + "PutCheckpoint",
        lambda a, t: checkpoints_pb2.PutCheckpointRequest(
            thread_id=a.thread_id,
            checkpoint_id="c2",
            checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"{}"),
            metadata_json="{}",
            fence=fence(a.turn_id),
        ),
    ),
    "PutWrites": (
        C + "PutWrites",
        lambda a, t: checkpoints_pb2.PutWritesRequest(
            thread_id=a.thread_id,
            checkpoint_id="c1",
            task_id="task-1",
            writes=[
                checkpoints_pb2.WriteInput(
                    idx=0, channel="ch", value=checkpoints_pb2.TypedValue(type="json", data=b"1")
                )
            ],
            fence=fence(a.turn_id),
        ),
    ),
    "CheckpointStream": (
        C + "CheckpointStream",
        lambda a, t: checkpoints_pb2.CheckpointStreamRequest(
            id=1,
            append=turns_pb2.AppendEventsRequest(
                turn_id=t, attempt=STALE, events=events(2, "token")
            ),
        ),
    ),
    "DeleteThread": (
        C + "DeleteThread",
        lambda a, t: checkpoints_pb2.DeleteThreadRequest(thread_id=a.thread_id),
    ),
    # The thread's turn is live: refused once authorised.
    "PruneThreads": (
        C + "PruneThreads",
        lambda a, t: checkpoints_pb2.PruneThreadsRequest(thread_ids=[a.thread_id]),
    ),
    # A thread onto itself: nothing to copy.
    "CopyThread": (
        C + "CopyThread",
        lambda a, t: checkpoints_pb2.CopyThreadRequest(
            source_thread_id=a.thread_id, target_thread_id=a.thread_id
        ),
    ),
    "DeleteForRuns": (
        C + "DeleteForRuns",
        lambda a, t: checkpoints_pb2.DeleteForRunsRequest(run_ids=["no-such-run"]),
    ),
}

# What each caller gets. "alpha" owns its seeded turn and thread; "beta" is another agent.
# Columns: no token, wrong token, alpha, beta, panel, operator, admin.
CALLERS = ("none", "wrong", "alpha", "beta", "panel", "operator", "admin")
U, D, N = UNAUTH, DENIED, NOT_FOUND
EXPECTED: dict[str, tuple[grpc.StatusCode, ...]] = {
    "StartTurn": (U, U, OK, D, D, D, OK),
    "TurnStatus": (U, U, OK, OK, OK, OK, OK),  # beta: OK, and the state is UNKNOWN
    # A panel reads the turns of the threads it owns; th-alpha is alpha's (decision 311).
    "GetTurn": (U, U, OK, N, N, OK, OK),
    "ListTurns": (U, U, D, D, D, OK, OK),
    "ListEvents": (U, U, OK, N, N, OK, OK),
    "Heartbeat": (U, U, ABORTED, N, D, D, ABORTED),
    "AppendEvents": (U, U, ABORTED, N, D, D, ABORTED),
    "ParkTurn": (U, U, ABORTED, N, D, D, ABORTED),
    "FinishTurn": (U, U, ABORTED, N, D, D, ABORTED),
    "ResumeDetached": (U, U, PRECONDITION, N, D, PRECONDITION, PRECONDITION),
    "Redrive (operator form)": (U, U, D, D, D, PRECONDITION, PRECONDITION),
    "Redrive (startup form)": (U, U, OK, D, D, D, OK),
    "ClaimTurn": (U, U, ABORTED, N, D, D, ABORTED),
    "WatchTurn": (U, U, OK, N, N, OK, OK),
    "CancelTurn": (U, U, INVALID, N, D, INVALID, INVALID),
    "BeginEffect": (U, U, ABORTED, N, D, D, ABORTED),
    "RecordEffect": (U, U, ABORTED, N, D, D, ABORTED),
    "ListEffects": (U, U, OK, N, D, OK, OK),
    "ListAgents": (U, U, D, D, D, OK, OK),
    "MigrateTurns": (U, U, D, D, D, PRECONDITION, PRECONDITION),
    "GetCheckpoint": (U, U, OK, D, D, OK, OK),
    "ListCheckpoints": (U, U, OK, D, D, OK, OK),
    "PutCheckpoint": (U, U, ABORTED, D, D, D, ABORTED),
    "PutWrites": (U, U, ABORTED, D, D, D, ABORTED),
    "DeleteThread": (U, U, PRECONDITION, D, D, D, PRECONDITION),
    "PruneThreads": (U, U, PRECONDITION, D, D, D, PRECONDITION),
    "CopyThread": (U, U, OK, D, D, D, OK),
    "DeleteForRuns": (U, U, D, D, D, D, OK),
    "CheckpointStream": (U, U, ABORTED, N, D, D, ABORTED),
}


def caller_metadata(env: Env, caller: str) -> Any:
    if caller == "none":
        return None
    if caller == "wrong":
        return bearer("not-a-token-anyone-was-given")
    return bearer(env.tokens[caller])


def test_every_rpc_of_both_services_is_in_the_matrix_and_the_rights_table() -> None:
    covered = {path for path, _ in CASES.values()}
    assert covered == set(METHODS), "a new RPC needs a row in CASES and EXPECTED"
    assert set(EXPECTED) == set(CASES)
    missing = set(METHODS) - set(auth.RIGHTS)
    assert not missing, f"RPCs without a rule in auth.RIGHTS (admin-only by default): {missing}"


async def test_role_by_rpc_matrix(env: Env) -> None:
    alpha = env.alpha.turn_id
    before = await env.turns.GetTurn(
        turns_pb2.GetTurnRequest(turn_id=alpha), metadata=bearer(env.tokens["admin"])
    )
    mismatches = []
    for case, (path, build) in CASES.items():
        for caller, expected in zip(CALLERS, EXPECTED[case], strict=True):
            code, details, responses = await invoke(
                env.channel, path, build(env.alpha, alpha), caller_metadata(env, caller)
            )
            if code != expected:
                mismatches.append(
                    f"{case} as {caller}: {code.name} ({details}), not {expected.name}"
                )
            if case == "TurnStatus" and caller == "beta":
                assert responses[0].state == turns_pb2.TURN_STATE_UNKNOWN
            if caller != "alpha" and code in (DENIED, NOT_FOUND):
                # Nothing of the stored turn in a refusal: not its state, owner or thread.
                for secret in ("RUNNING", "r1", "i1", "th-beta"):
                    assert secret not in details, f"{case} as {caller}: {details}"
    assert not mismatches, "\n".join(mismatches)
    after = await env.turns.GetTurn(
        turns_pb2.GetTurnRequest(turn_id=alpha), metadata=bearer(env.tokens["admin"])
    )
    assert after == before, "the matrix's calls were chosen to change nothing"


@pytest.mark.parametrize(
    "case",
    [c for c, row in EXPECTED.items() if row[CALLERS.index("beta")] in (NOT_FOUND, DENIED)],
)
async def test_another_agents_turn_looks_exactly_like_one_that_does_not_exist(
    env: Env, case: str
) -> None:
    path, build = CASES[case]
    beta = bearer(env.tokens["beta"])
    existing = await invoke(env.channel, path, build(env.alpha, env.alpha.turn_id), beta)
    request = build(env.alpha, "t-nope")
    # Checkpoint cases name a thread, not a turn: point them at a thread never seen.
    if getattr(request, "thread_id", "") == env.alpha.thread_id:
        setattr(request, "thread_id", "th-nope")  # noqa: B010
    missing = await invoke(env.channel, path, request, beta)
    assert existing[0] == missing[0]

    def normalise(details: str) -> str:
        for name in (env.alpha.thread_id, "th-nope", env.alpha.turn_id, "t-nope"):
            details = details.replace(name, "X")
        return details

    assert normalise(existing[1]) == normalise(missing[1])


async def test_a_fence_naming_another_agents_turn_is_not_found(env: Env) -> None:
    alpha = bearer(env.tokens["alpha"])
    request = CASES["PutCheckpoint"][1](env.alpha, env.alpha.turn_id)
    assert isinstance(request, checkpoints_pb2.PutCheckpointRequest)
    request.fence.CopyFrom(fence(env.beta.turn_id, 0))
    code, foreign, _ = await invoke(env.channel, C + "PutCheckpoint", request, alpha)
    request.fence.CopyFrom(fence("t-nope", 0))
    code2, missing, _ = await invoke(env.channel, C + "PutCheckpoint", request, alpha)
    assert code == code2 == NOT_FOUND, (foreign, missing)
    assert foreign.replace(env.beta.turn_id, "X") == missing.replace("t-nope", "X")
    assert "th-beta" not in foreign


async def test_agents_start_turns_for_themselves_on_threads_of_their_own(env: Env) -> None:
    alpha, beta = bearer(env.tokens["alpha"]), bearer(env.tokens["beta"])
    unique = uuid.uuid4().hex[:12]
    # beta may not start a turn on alpha's thread (even once alpha's turn ends) ...
    on_alphas_thread = turns_pb2.StartTurnRequest(
        turn_id=f"t-b2-{unique}", thread_id=env.alpha.thread_id, agent="beta", input=value(1)
    )
    code, details, _ = await invoke(env.channel, T + "StartTurn", on_alphas_thread, beta)
    assert code == DENIED, details
    # ... nor act for alpha ...
    for_alpha = turns_pb2.StartTurnRequest(
        turn_id=f"t-b3-{unique}", thread_id=f"th-new-b-{unique}", agent="alpha", input=value(1)
    )
    assert (await invoke(env.channel, T + "StartTurn", for_alpha, beta))[0] == DENIED
    # ... and alpha opens a new thread, whose checkpoints are then alpha's alone.
    own = turns_pb2.StartTurnRequest(
        turn_id=f"t-a2-{unique}", thread_id=f"th-new-a-{unique}", agent="alpha", input=value(1)
    )
    assert (await invoke(env.channel, T + "StartTurn", own, alpha))[0] == OK
    get = checkpoints_pb2.GetCheckpointRequest(thread_id=f"th-new-a-{unique}")
    assert (await invoke(env.channel, C + "GetCheckpoint", get, alpha))[0] == OK
    assert (await invoke(env.channel, C + "GetCheckpoint", get, beta))[0] == DENIED
    # A thread no turn was ever started on is closed to agent tokens ...
    fresh = checkpoints_pb2.GetCheckpointRequest(thread_id=f"th-fresh-{unique}")
    assert (await invoke(env.channel, C + "GetCheckpoint", fresh, alpha))[0] == DENIED
    # ... and an agent lists one thread at a time.
    every = checkpoints_pb2.ListCheckpointsRequest()
    assert (await invoke(env.channel, C + "ListCheckpoints", every, alpha))[0] == DENIED
    operator = bearer(env.tokens["operator"])
    assert (await invoke(env.channel, C + "ListCheckpoints", every, operator))[0] == OK


@pytest.mark.parametrize(
    "header",
    [
        "Basic dXNlcjpwYXNz",
        "Bearer",
        "Bearer ",
        "Token tk-admin",
        "tk-admin",
        "Bearer " + "x" * 5000,
    ],
)
async def test_malformed_authorization_is_unauthenticated(env: Env, header: str) -> None:
    code, details, _ = await invoke(
        env.channel,
        T + "TurnStatus",
        turns_pb2.TurnStatusRequest(turn_id=env.alpha.turn_id),
        (("authorization", header),),
    )
    assert code == UNAUTH, details


async def test_scheme_is_case_insensitive_and_one_header_only(env: Env) -> None:
    request = turns_pb2.TurnStatusRequest(turn_id=env.alpha.turn_id)
    token = env.tokens["panel"]
    code, _, _ = await invoke(
        env.channel, T + "TurnStatus", request, (("authorization", f"bearer {token}"),)
    )
    assert code == OK
    two = (("authorization", f"Bearer {token}"), ("authorization", f"Bearer {token}"))
    code, details, _ = await invoke(env.channel, T + "TurnStatus", request, two)
    assert code == UNAUTH
    assert "one authorization header" in details


async def test_unauthenticated_requests_are_refused_before_they_are_parsed(env: Env) -> None:
    # Bytes that are no protobuf at all: without a token, UNAUTHENTICATED, not a parse error.
    raw = env.channel.unary_unary(
        T + "StartTurn", request_serializer=lambda b: b, response_deserializer=lambda b: b
    )
    with pytest.raises(aio.AioRpcError) as info:
        await raw(b"\xff\xff\xff\xff")
    assert info.value.code() == UNAUTH
    with pytest.raises(aio.AioRpcError) as info:
        await raw(b"\xff\xff\xff\xff", metadata=bearer(env.tokens["admin"]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_health_is_open_and_reflection_needs_a_token(env: Env) -> None:
    health = health_pb2_grpc.HealthStub(env.channel)
    response = await health.Check(health_pb2.HealthCheckRequest(service=""))
    assert response.status == health_pb2.HealthCheckResponse.SERVING

    async def list_services(metadata: Any, ask: bool = True) -> list[str]:
        stub = reflection_pb2_grpc.ServerReflectionStub(env.channel)
        asks = [reflection_pb2.ServerReflectionRequest(list_services="")] if ask else []
        call = stub.ServerReflectionInfo(iter(asks), metadata=metadata)
        names: list[str] = []
        async for r in call:
            names.extend(s.name for s in r.list_services_response.service)
        return names

    # Refused when the call opens, before any message is read. No message is sent on
    # the refused call: grpc's client, sending one into a call the server had already
    # ended, once reported its own INTERNAL ("Failed execute_batch") in place of the
    # server's status (a CI run on PostgreSQL).
    with pytest.raises(aio.AioRpcError) as info:
        await list_services(None, ask=False)
    assert info.value.code() == UNAUTH
    assert "turnkeeper.v1.TurnService" in await list_services(bearer(env.tokens["panel"]))


async def test_checkpoint_deletes_and_copies_are_admin_or_own_and_audited(
    audited: tuple[Env, TurnkeeperServer],
) -> None:
    """PruneThreads, DeleteForRuns and CopyThread destroy or overwrite history: an
    agent on its own threads and admins may; operators may not; each is audited."""
    env, server = audited
    admin, operator = bearer(env.tokens["admin"]), bearer(env.tokens["operator"])
    copy = checkpoints_pb2.CopyThreadRequest(
        source_thread_id=env.alpha.thread_id, target_thread_id="th-copy"
    )
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await env.checkpoints.CopyThread(copy, metadata=operator)
    assert refused.value.code() == DENIED
    await env.checkpoints.CopyThread(copy, metadata=admin)
    await env.checkpoints.DeleteForRuns(
        checkpoints_pb2.DeleteForRunsRequest(run_ids=["r-1", "r-2"]), metadata=admin
    )
    audit = [
        (r.actor, r.action, r.target, r.outcome)
        for r in server.audit.list(100)
        if r.action in ("copy_thread", "delete_for_runs", "prune_threads")
    ]
    assert audit == [
        ("admin (admin)", "delete_for_runs", "r-1,r-2", "ok"),
        ("admin (admin)", "copy_thread", f"{env.alpha.thread_id} -> th-copy", "ok"),
    ]
