"""The typed clients against a scripted in-process gRPC server on port 0: which RPCs
are retried on UNAVAILABLE, call metadata, deadlines, streams and close().

The scripted servicer stands in for the service only where the behaviour under test
is the client's own (retry policy, error mapping); everything about the service's
semantics is tested against the real one in test_remote_saver.py."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
import pytest
from turnkeeper import errors
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions, TurnkeeperClient
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc

from tests.support.security import CertificateAuthority

pytestmark = pytest.mark.timeout(60)

Context = grpc.aio.ServicerContext[Any, Any]


class ScriptedTurns(turns_pb2_grpc.TurnServiceServicer):
    """Fails the first ``failures[turn_id]`` calls of any RPC with UNAVAILABLE."""

    def __init__(self) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.failures: dict[str, int] = {}
        self.metadata: list[dict[str, str | bytes]] = []
        self.watch_ended = threading.Event()

    async def _enter(self, rpc: str, turn_id: str, context: Context) -> None:
        self.calls[rpc, turn_id] += 1
        self.metadata.append(dict(context.invocation_metadata() or ()))
        if self.calls[rpc, turn_id] <= self.failures.get(turn_id, 0):
            await context.abort(grpc.StatusCode.UNAVAILABLE, "draining")
        if turn_id == "parked-elsewhere":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "turn is not PARKED")
        if turn_id == "slow":
            await asyncio.sleep(5)

    async def TurnStatus(
        self, request: turns_pb2.TurnStatusRequest, context: Context
    ) -> turns_pb2.TurnStatusResponse:
        await self._enter("TurnStatus", request.turn_id, context)
        return turns_pb2.TurnStatusResponse(
            turn_id=request.turn_id, state=turns_pb2.TURN_STATE_RUNNING
        )

    async def StartTurn(
        self, request: turns_pb2.StartTurnRequest, context: Context
    ) -> turns_pb2.StartTurnResponse:
        await self._enter("StartTurn", request.turn_id, context)
        return turns_pb2.StartTurnResponse(created=True)

    async def FinishTurn(
        self, request: turns_pb2.FinishTurnRequest, context: Context
    ) -> turns_pb2.FinishTurnResponse:
        await self._enter("FinishTurn", request.turn_id, context)
        return turns_pb2.FinishTurnResponse()

    async def ParkTurn(
        self, request: turns_pb2.ParkTurnRequest, context: Context
    ) -> turns_pb2.ParkTurnResponse:
        await self._enter("ParkTurn", request.turn_id, context)
        return turns_pb2.ParkTurnResponse()

    async def ResumeDetached(
        self, request: turns_pb2.ResumeDetachedRequest, context: Context
    ) -> turns_pb2.ResumeDetachedResponse:
        await self._enter("ResumeDetached", request.turn_id, context)
        return turns_pb2.ResumeDetachedResponse()

    async def ClaimTurn(
        self, request: turns_pb2.ClaimTurnRequest, context: Context
    ) -> turns_pb2.ClaimTurnResponse:
        await self._enter("ClaimTurn", request.turn_id, context)
        return turns_pb2.ClaimTurnResponse()

    async def Redrive(
        self, request: turns_pb2.RedriveRequest, context: Context
    ) -> turns_pb2.RedriveResponse:
        await self._enter("Redrive", request.turn_id, context)
        return turns_pb2.RedriveResponse()

    async def WatchTurn(
        self, request: turns_pb2.WatchTurnRequest, context: Context
    ) -> AsyncIterator[turns_pb2.WatchTurnResponse]:
        await self._enter("WatchTurn", request.turn_id, context)
        try:
            for seq in range(request.after_seq + 1, request.after_seq + 3):
                yield turns_pb2.WatchTurnResponse(
                    event=turns_pb2.Event(seq=seq, type="token", data_json="{}")
                )
            if request.turn_id == "fenced":
                await context.abort(grpc.StatusCode.ABORTED, "attempt 1 was re-driven")
            await asyncio.Event().wait()  # a live turn: the stream stays open
        finally:
            # Reached only when the stream ends: grpc cancels the handler, or, when the
            # caller left while a frame was being sent, closes it at its yield.
            self.watch_ended.set()


def fast(target: str, **options: Any) -> ConnectionOptions:
    """Options with a short retry backoff, to keep the tests quick."""
    return ConnectionOptions(
        target=target, retry_initial_backoff=0.01, retry_max_backoff=0.02, **options
    )


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[ScriptedTurns, str]]:
    server = grpc.aio.server()
    servicer = ScriptedTurns()  # type: ignore[abstract]  # only the RPCs under test
    turns_pb2_grpc.add_TurnServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        await server.stop(None)


async def test_idempotent_rpc_is_retried_on_unavailable(
    scripted: tuple[ScriptedTurns, str],
) -> None:
    servicer, target = scripted
    servicer.failures["t1"] = 2
    async with AsyncTurnkeeperClient(fast(target)) as client:
        status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t1"))
        started = await client.start_turn(turns_pb2.StartTurnRequest(turn_id="t1"))
    assert status.state == turns_pb2.TURN_STATE_RUNNING
    assert started.created
    assert servicer.calls["TurnStatus", "t1"] == 3
    assert servicer.calls["StartTurn", "t1"] == 3


async def test_retries_are_bounded(scripted: tuple[ScriptedTurns, str]) -> None:
    servicer, target = scripted
    servicer.failures["t1"] = 100
    options = fast(target, retry_max_attempts=3)
    async with AsyncTurnkeeperClient(options) as client:
        with pytest.raises(errors.Unavailable, match="draining"):
            await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t1"))
    assert servicer.calls["TurnStatus", "t1"] == 3


def _state_changes(
    client: AsyncTurnkeeperClient,
) -> dict[str, Callable[[], Awaitable[object]]]:
    return {
        "FinishTurn": lambda: client.finish_turn(turns_pb2.FinishTurnRequest(turn_id="t1")),
        "ParkTurn": lambda: client.park_turn(turns_pb2.ParkTurnRequest(turn_id="t1")),
        "ResumeDetached": lambda: client.resume_detached(
            turns_pb2.ResumeDetachedRequest(turn_id="t1")
        ),
        "ClaimTurn": lambda: client.claim_turn(turns_pb2.ClaimTurnRequest(turn_id="t1")),
        "Redrive": lambda: client.redrive(turns_pb2.RedriveRequest(turn_id="t1")),
    }


@pytest.mark.parametrize(
    "rpc", ["FinishTurn", "ParkTurn", "ResumeDetached", "ClaimTurn", "Redrive"]
)
async def test_state_changes_are_never_retried(
    scripted: tuple[ScriptedTurns, str], rpc: str
) -> None:
    servicer, target = scripted
    servicer.failures["t1"] = 1
    async with AsyncTurnkeeperClient(fast(target)) as client:
        with pytest.raises(errors.Unavailable) as raised:
            await _state_changes(client)[rpc]()
    assert raised.value.rpc == rpc
    assert servicer.calls[rpc, "t1"] == 1


async def test_sync_client_retries_the_same_way(scripted: tuple[ScriptedTurns, str]) -> None:
    servicer, target = scripted
    servicer.failures["t1"] = 2

    def run() -> None:
        with TurnkeeperClient(fast(target)) as client:
            client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t1"))
            with pytest.raises(errors.Unavailable):
                client.finish_turn(turns_pb2.FinishTurnRequest(turn_id="t1"))

    await asyncio.to_thread(run)
    assert servicer.calls["TurnStatus", "t1"] == 3
    assert servicer.calls["FinishTurn", "t1"] == 1


async def test_bearer_token_is_sent_on_every_call(scripted: tuple[ScriptedTurns, str]) -> None:
    servicer, target = scripted
    options = ConnectionOptions(target=target, bearer_token="s3cret")
    async with AsyncTurnkeeperClient(options) as client:
        await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t1"))
    await asyncio.to_thread(
        lambda: TurnkeeperClient(options).turn_status(turns_pb2.TurnStatusRequest(turn_id="t2"))
    )
    assert [m.get("authorization") for m in servicer.metadata] == ["Bearer s3cret"] * 2


async def test_status_codes_arrive_as_domain_errors(
    scripted: tuple[ScriptedTurns, str],
) -> None:
    _, target = scripted
    async with AsyncTurnkeeperClient(ConnectionOptions(target=target)) as client:
        with pytest.raises(errors.WrongState, match="not PARKED") as raised:
            await client.resume_detached(
                turns_pb2.ResumeDetachedRequest(turn_id="parked-elsewhere")
            )
    assert raised.value.code is grpc.StatusCode.FAILED_PRECONDITION
    assert isinstance(raised.value.__cause__, grpc.aio.AioRpcError)


async def test_default_deadline_applies(scripted: tuple[ScriptedTurns, str]) -> None:
    _, target = scripted
    async with AsyncTurnkeeperClient(ConnectionOptions(target=target, default_timeout=0.2)) as c:
        with pytest.raises(errors.TurnkeeperError) as raised:
            await c.turn_status(turns_pb2.TurnStatusRequest(turn_id="slow"))
    assert raised.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


async def test_watch_turn_maps_stream_errors(scripted: tuple[ScriptedTurns, str]) -> None:
    _, target = scripted
    seqs: list[int] = []

    async def watch(client: AsyncTurnkeeperClient) -> None:
        request = turns_pb2.WatchTurnRequest(turn_id="fenced", after_seq=4)
        async for frame in client.watch_turn(request):
            seqs.append(frame.event.seq)

    async with AsyncTurnkeeperClient(ConnectionOptions(target=target)) as client:
        with pytest.raises(errors.StaleAttempt):
            await watch(client)
    assert seqs == [5, 6]


async def test_leaving_a_watch_early_cancels_the_stream(
    scripted: tuple[ScriptedTurns, str],
) -> None:
    servicer, target = scripted
    async with AsyncTurnkeeperClient(ConnectionOptions(target=target)) as client:
        frames = client.watch_turn(turns_pb2.WatchTurnRequest(turn_id="t1"))
        async for _ in frames:
            break
        await frames.aclose()  # type: ignore[attr-defined]
        # Returns as soon as the handler has ended (the bound is for a loaded machine).
        await asyncio.to_thread(servicer.watch_ended.wait, 30)
    assert servicer.watch_ended.is_set()


async def test_a_watch_whose_client_is_closed_under_it_ends_with_cancelled(
    scripted: tuple[ScriptedTurns, str],
) -> None:
    # grpc ends the reading of a call cancelled in this process (the channel closed by
    # another task) with CancelledError: the reading task, which nobody cancelled,
    # ended as if it had been (a follower's pump then told its follower nothing).
    _, target = scripted
    first = asyncio.Event()

    async def watch(client: AsyncTurnkeeperClient) -> None:
        async for _ in client.watch_turn(turns_pb2.WatchTurnRequest(turn_id="t1")):
            first.set()

    client = AsyncTurnkeeperClient(ConnectionOptions(target=target))
    watching = asyncio.create_task(watch(client))
    await asyncio.wait_for(first.wait(), 30)
    await client.close()
    with pytest.raises(errors.TurnkeeperError) as ended:
        await asyncio.wait_for(watching, 30)
    assert ended.value.code == grpc.StatusCode.CANCELLED


async def test_sync_watch_turn(scripted: tuple[ScriptedTurns, str]) -> None:
    _, target = scripted
    seqs: list[int] = []

    def watch() -> None:
        with TurnkeeperClient(ConnectionOptions(target=target)) as client:
            for frame in client.watch_turn(turns_pb2.WatchTurnRequest(turn_id="fenced")):
                seqs.append(frame.event.seq)

    with pytest.raises(errors.StaleAttempt):
        await asyncio.to_thread(watch)
    assert seqs == [1, 2]


async def test_close_is_safe_twice_and_final(scripted: tuple[ScriptedTurns, str]) -> None:
    _, target = scripted
    client = AsyncTurnkeeperClient(ConnectionOptions(target=target))
    await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t1"))
    await client.close()
    await client.close()
    with pytest.raises(RuntimeError, match="closed"):
        await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t1"))
    never_used = AsyncTurnkeeperClient(ConnectionOptions(target=target))
    await never_used.close()

    sync_client = TurnkeeperClient(ConnectionOptions(target=target))
    sync_client.close()
    sync_client.close()


def test_async_client_belongs_to_one_loop() -> None:
    client = AsyncTurnkeeperClient(ConnectionOptions(target="127.0.0.1:1", default_timeout=0.1))

    async def call() -> None:
        # Nothing listens there: the channel, not the answer, is what matters.
        with contextlib.suppress(errors.TurnkeeperError):
            await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t1"))

    asyncio.run(call())
    with pytest.raises(RuntimeError, match="another event loop"):
        asyncio.run(call())


async def test_unreachable_service_is_unavailable() -> None:
    options = fast("127.0.0.1:1", retry_max_attempts=2)
    async with AsyncTurnkeeperClient(options) as client:
        with pytest.raises(errors.Unavailable):
            await client.turn_status(turns_pb2.TurnStatusRequest(turn_id="t1"))


@pytest.fixture
async def mutual_tls(
    tmp_path: Path,
) -> AsyncIterator[tuple[ScriptedTurns, str, CertificateAuthority]]:
    """The scripted server behind TLS that requires a client certificate."""
    ca = CertificateAuthority(tmp_path)
    issued = ca.issue("server", server=True)
    credentials = grpc.ssl_server_credentials(
        [(issued.key_pem, issued.cert_pem)], root_certificates=ca.pem, require_client_auth=True
    )
    server = grpc.aio.server()
    servicer = ScriptedTurns()  # type: ignore[abstract]  # only the RPCs under test
    turns_pb2_grpc.add_TurnServiceServicer_to_server(servicer, server)
    port = server.add_secure_port("127.0.0.1:0", credentials)
    await server.start()
    try:
        yield servicer, f"127.0.0.1:{port}", ca
    finally:
        await server.stop(None)


async def test_mutual_tls_from_certificate_paths(
    mutual_tls: tuple[ScriptedTurns, str, CertificateAuthority],
) -> None:
    servicer, target, ca = mutual_tls
    client_cert = ca.issue("agent", server=False)
    options = ConnectionOptions(
        target=target,
        root_certificates=ca.files.cert,
        client_certificate=client_cert.cert,
        client_key=client_cert.key,
        bearer_token="s3cret",
    )
    request = turns_pb2.TurnStatusRequest(turn_id="t1")
    async with AsyncTurnkeeperClient(options) as client:
        assert (await client.turn_status(request)).turn_id == "t1"
    sync_status = await asyncio.to_thread(lambda: TurnkeeperClient(options).turn_status(request))
    assert sync_status.turn_id == "t1"
    assert [m.get("authorization") for m in servicer.metadata] == ["Bearer s3cret"] * 2


async def test_tls_without_client_certificate_or_plaintext_is_refused(
    mutual_tls: tuple[ScriptedTurns, str, CertificateAuthority],
) -> None:
    servicer, target, ca = mutual_tls
    request = turns_pb2.TurnStatusRequest(turn_id="t1")
    for options in (
        fast(target, root_certificates=ca.files.cert, retry_max_attempts=1),
        fast(target, retry_max_attempts=1),
    ):
        async with AsyncTurnkeeperClient(options) as client:
            with pytest.raises(errors.Unavailable):
                await client.turn_status(request, timeout=5)
    assert not servicer.calls


def test_a_channel_dials_again_within_two_seconds_however_long_the_service_was_away() -> None:
    # grpc's default reconnect back-off grows to 120 s: an agent started before its
    # service said "unreachable" for 12 s and more after the service was up (issue 49).
    options: dict[str, Any] = dict(ConnectionOptions().channel_options())
    assert options["grpc.max_reconnect_backoff_ms"] <= 2000
    assert options["grpc.initial_reconnect_backoff_ms"] <= options["grpc.max_reconnect_backoff_ms"]
