"""Limits and validation: each refusal is INVALID_ARGUMENT or RESOURCE_EXHAUSTED with
a message that names the limit. Small limits are set per test so the payloads stay
small; a real service on port 0."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest
from google.protobuf import message, struct_pb2
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2, checkpoints_pb2_grpc, turns_pb2, turns_pb2_grpc
from turnkeeper_server.errors import InvalidArgument
from turnkeeper_server.limits import Limits, check_json_text

from tests.support.security import bearer, write_tokens
from tests.support.service import ServiceFactory, expect_code
from tests.support.turns import events, start, value

if TYPE_CHECKING:
    from turnkeeper.v1.checkpoints_pb2_grpc import CheckpointServiceAsyncStub
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub

pytestmark = [pytest.mark.timeout(60), pytest.mark.unrenewed]

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED

SMALL = Limits(
    max_id_length=32,
    max_input_bytes=2000,
    max_resume_bytes=200,
    max_json_depth=5,
    max_event_bytes=800,
    max_events_per_batch=3,
    max_checkpoint_bytes=1000,
    max_writes_per_call=2,
    max_page_size=10,
    max_error_bytes=100,
    max_batch_bytes=1000,
    max_filter_bytes=100,
    max_name_length=16,
    max_message_bytes=64 << 10,
    max_watch_streams_per_client=2,
    max_checkpoint_streams_per_client=2,
)


class Stubs:
    def __init__(self, channel: aio.Channel) -> None:
        self.channel = channel
        self.turns: TurnServiceAsyncStub = turns_pb2_grpc.TurnServiceStub(channel)
        self.checkpoints: CheckpointServiceAsyncStub = checkpoints_pb2_grpc.CheckpointServiceStub(
            channel
        )


@pytest.fixture
async def small(make_service: ServiceFactory) -> AsyncIterator[Stubs]:
    server = await make_service(limits=SMALL)
    async with aio.insecure_channel(server.address) as channel:
        stubs = Stubs(channel)
        await start(stubs.turns, "t1", "th1", replica="r1", incarnation="i1")
        yield stubs


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = [value]
    return value


async def refused(call: Awaitable[Any], code: grpc.StatusCode, *names: str) -> None:
    details = await expect_code(call, code)
    for name in names:
        assert name in details, f"{details!r} does not name {name!r}"


def append(*inputs: turns_pb2.EventInput) -> turns_pb2.AppendEventsRequest:
    return turns_pb2.AppendEventsRequest(turn_id="t1", attempt=0, events=list(inputs))


def event(seq: int, data: str) -> turns_pb2.EventInput:
    return turns_pb2.EventInput(seq=seq, type="token", data_json=data)


def put(**fields: Any) -> checkpoints_pb2.PutCheckpointRequest:
    base: dict[str, Any] = {
        "thread_id": "th1",
        "checkpoint_id": "c1",
        "checkpoint": checkpoints_pb2.TypedValue(type="json", data=b"{}"),
        "metadata_json": "{}",
    }
    base.update(fields)
    return checkpoints_pb2.PutCheckpointRequest(**base)


async def test_ids(small: Stubs) -> None:
    t = small.turns
    await refused(
        t.TurnStatus(turns_pb2.TurnStatusRequest(turn_id="x" * 33)), INVALID, "the limit is 32"
    )
    await refused(t.GetTurn(turns_pb2.GetTurnRequest(turn_id="a b")), INVALID, "characters outside")
    await refused(t.GetTurn(turns_pb2.GetTurnRequest(turn_id="")), INVALID, "turn_id is required")
    await refused(start(t, "t2", "th2", agent="has.dot"), INVALID, "agent", "letters, digits")
    await refused(
        small.checkpoints.GetCheckpoint(checkpoints_pb2.GetCheckpointRequest(thread_id="th1\x00")),
        INVALID,
        "thread_id",
    )
    await refused(
        small.checkpoints.GetCheckpoint(
            checkpoints_pb2.GetCheckpointRequest(thread_id="th1", checkpoint_ns="n" * 1025)
        ),
        INVALID,
        "checkpoint_ns",
        "the limit is 1024",
    )


async def test_event_batches(small: Stubs) -> None:
    t = small.turns
    await refused(
        t.AppendEvents(append(*events(1, "a", "b", "c", "d"))), INVALID, "4 events", "limit is 3"
    )
    await refused(
        t.AppendEvents(append(event(1, json.dumps("x" * 900)))), INVALID, "the limit is 800"
    )
    await refused(
        t.AppendEvents(append(event(1, json.dumps("x" * 600)), event(2, json.dumps("y" * 600)))),
        INVALID,
        "the batch of events",
        "the limit is 1000",
    )
    await refused(
        t.AppendEvents(append(event(1, json.dumps(nested(6))))),
        INVALID,
        "nested deeper than 5 levels",
    )
    await refused(t.AppendEvents(append(event(1, "[" * 700))), INVALID, "data_json")
    await refused(t.AppendEvents(append(event(1, "NaN"))), INVALID, "not valid JSON")
    await refused(t.AppendEvents(append(event(1, "{"))), INVALID, "not valid JSON")
    await refused(
        t.AppendEvents(append(turns_pb2.EventInput(seq=1, type="x" * 65, data_json="1"))),
        INVALID,
        "1 to 64 characters",
    )
    # Every refusal left the turn as it was.
    assert (await t.GetTurn(turns_pb2.GetTurnRequest(turn_id="t1"))).turn.last_seq == 0


async def test_values_input_resume_interrupt_error(small: Stubs) -> None:
    t = small.turns
    await refused(
        start(t, "t2", "th2", input={"q": "x" * 3000}), INVALID, "input", "the limit is 2000"
    )
    await refused(start(t, "t2", "th2", input=nested(6)), INVALID, "input is nested deeper than 5")
    await refused(
        t.ResumeDetached(turns_pb2.ResumeDetachedRequest(turn_id="t1", resume=value("x" * 300))),
        INVALID,
        "resume",
        "the limit is 200",
    )
    await refused(
        t.ResumeDetached(turns_pb2.ResumeDetachedRequest(turn_id="t1", resume=value(nested(6)))),
        INVALID,
        "resume is nested deeper than 5",
    )
    for x in (float("nan"), float("inf")):
        await refused(
            t.ResumeDetached(
                turns_pb2.ResumeDetachedRequest(
                    turn_id="t1", resume=struct_pb2.Value(number_value=x)
                )
            ),
            INVALID,
            "resume is not valid JSON",
        )
    await refused(
        t.ParkTurn(turns_pb2.ParkTurnRequest(turn_id="t1", interrupt=value(nested(6)))),
        INVALID,
        "interrupt is nested deeper than 5",
    )
    await refused(
        t.FinishTurn(
            turns_pb2.FinishTurnRequest(
                turn_id="t1", outcome=turns_pb2.OUTCOME_FAILED, error="e" * 101
            )
        ),
        INVALID,
        "error",
        "the limit is 100",
    )


async def test_pages(small: Stubs) -> None:
    t = small.turns
    await refused(
        t.ListTurns(turns_pb2.ListTurnsRequest(page_size=11)), INVALID, "over the limit of 10"
    )
    await refused(
        t.ListEvents(turns_pb2.ListEventsRequest(turn_id="t1", page_size=11)),
        INVALID,
        "over the limit of 10",
    )
    await refused(
        t.ListTurns(turns_pb2.ListTurnsRequest(page_size=-1)), INVALID, "must not be negative"
    )
    await refused(
        t.ListTurns(turns_pb2.ListTurnsRequest(page_token="A" * 65)),
        INVALID,
        "page_token",
        "the limit is 64",
    )
    await refused(
        t.ListTurns(turns_pb2.ListTurnsRequest(page_token="bm90LWEtdG9rZW4=")),
        INVALID,
        "page_token",
    )


async def first(stream: Any) -> Any:
    async for item in stream:
        return item
    return None


async def test_checkpoints(small: Stubs) -> None:
    c = small.checkpoints
    await refused(
        c.PutCheckpoint(put(checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"x" * 1001))),
        INVALID,
        "checkpoint is",
        "the limit is 1000",
    )
    await refused(
        c.PutCheckpoint(put(metadata_json=json.dumps(nested(6)))),
        INVALID,
        "metadata_json is nested deeper than 5",
    )
    await refused(
        c.PutCheckpoint(put(checkpoint=checkpoints_pb2.TypedValue(type="t" * 17, data=b"{}"))),
        INVALID,
        "checkpoint.type",
        "the limit is 16",
    )
    await refused(
        first(c.ListCheckpoints(checkpoints_pb2.ListCheckpointsRequest(filter_json="[" * 101))),
        INVALID,
        "filter_json",
        "the limit is 100",
    )
    await refused(
        first(
            c.ListCheckpoints(
                checkpoints_pb2.ListCheckpointsRequest(filter_json=json.dumps({"a": nested(6)}))
            )
        ),
        INVALID,
        "filter_json is nested deeper than 5",
    )

    def write(channel: str = "ch", type_: str = "json") -> checkpoints_pb2.WriteInput:
        return checkpoints_pb2.WriteInput(
            idx=0, channel=channel, value=checkpoints_pb2.TypedValue(type=type_, data=b"1")
        )

    def writes(*items: checkpoints_pb2.WriteInput, **fields: Any) -> Any:
        return c.PutWrites(
            checkpoints_pb2.PutWritesRequest(
                thread_id="th1",
                checkpoint_id="c1",
                task_id=fields.get("task_id", "task"),
                task_path=fields.get("task_path", ""),
                writes=list(items),
            )
        )

    await refused(writes(write(), write(), write()), INVALID, "3 writes", "the limit is 2")
    await refused(writes(write(channel="c" * 17)), INVALID, "channel", "the limit is 16")
    await refused(writes(write(type_="t" * 17)), INVALID, "value.type", "the limit is 16")
    await refused(writes(write(), task_id="k" * 33), INVALID, "task_id", "the limit is 32")
    await refused(writes(write(), task_path="p" * 1025), INVALID, "task_path", "limit is 1024")


# Not a protobuf message of any type: a tag whose varint never ends.
CORRUPT = b"\xff\xff\xff\xff"


def raw(data: bytes) -> bytes:
    return data


async def test_every_rpc_answers_bytes_that_do_not_parse_with_invalid_argument(
    small: Stubs,
) -> None:
    for service in (
        turns_pb2.DESCRIPTOR.services_by_name["TurnService"],
        checkpoints_pb2.DESCRIPTOR.services_by_name["CheckpointService"],
    ):
        for method in service.methods:
            path = f"/{service.full_name}/{method.name}"
            if method.server_streaming:
                call: Any = first(small.channel.unary_stream(path, raw, raw)(CORRUPT))
            else:
                call = small.channel.unary_unary(path, raw, raw)(CORRUPT)
            await refused(call, INVALID, "not a valid protobuf message")


async def test_messages_over_the_channel_cap_are_resource_exhausted(
    make_service: ServiceFactory,
) -> None:
    server = await make_service(limits=SMALL)
    # The client would send it; the server's cap (max_message_bytes, 64 KiB here) refuses.
    async with aio.insecure_channel(
        server.address, options=[("grpc.max_send_message_length", 1 << 20)]
    ) as channel:
        stub = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        big = put(checkpoint=checkpoints_pb2.TypedValue(type="json", data=b"x" * (100 << 10)))
        await refused(stub.PutCheckpoint(big), EXHAUSTED)


def test_json_deeper_than_the_parsers_own_guard_is_invalid_argument() -> None:
    with pytest.raises(InvalidArgument, match="nested deeper than 10 levels"):
        check_json_text("data_json", "[" * 100_000, 1 << 20, 10)


def test_limits_keep_the_channel_cap_over_the_checkpoint_limit() -> None:
    with pytest.raises(ValueError, match="max_message_bytes"):
        Limits(max_checkpoint_bytes=1 << 20, max_message_bytes=1 << 20)


async def open_watch(stub: TurnServiceAsyncStub, metadata: Any = None) -> Any:
    """A WatchTurn stream the server has registered (its first frame arrived)."""
    call = stub.WatchTurn(turns_pb2.WatchTurnRequest(turn_id="t1"), metadata=metadata)
    frame = await asyncio.wait_for(call.read(), 5)
    assert isinstance(frame, turns_pb2.WatchTurnResponse)
    return call


async def watch_refused(stub: TurnServiceAsyncStub, metadata: Any = None) -> str:
    call = stub.WatchTurn(turns_pb2.WatchTurnRequest(turn_id="t1"), metadata=metadata)
    with pytest.raises(aio.AioRpcError) as info:
        await asyncio.wait_for(call.read(), 5)
    assert info.value.code() == EXHAUSTED, info.value.details()
    return info.value.details() or ""


async def test_checkpoint_streams_per_peer(small: Stubs) -> None:
    get = checkpoints_pb2.CheckpointStreamRequest(
        id=1, get=checkpoints_pb2.GetCheckpointRequest(thread_id="th")
    )
    calls = []
    for _ in range(2):
        call = small.checkpoints.CheckpointStream(None)
        await call.write(get)
        answer = await asyncio.wait_for(call.read(), 5)
        assert isinstance(answer, checkpoints_pb2.CheckpointStreamResponse)
        assert answer.id == 1  # the service has registered the stream
        calls.append(call)
    # The service refuses the third as it opens, before it reads a message: nothing
    # is written (a write could meet the call already ended, and grpc would end it
    # INTERNAL on the client's side instead of with the service's status).
    third = small.checkpoints.CheckpointStream(None)
    with pytest.raises(aio.AioRpcError) as info:
        await asyncio.wait_for(third.read(), 5)
    assert info.value.code() == EXHAUSTED, info.value.details()
    assert "max_checkpoint_streams_per_client" in (info.value.details() or "")
    assert "the limit is 2" in (info.value.details() or "")
    for call in calls:
        call.cancel()


async def test_watch_streams_per_peer(small: Stubs) -> None:
    await small.turns.AppendEvents(append(*events(1, "step")))
    streams = [await open_watch(small.turns) for _ in range(2)]
    details = await watch_refused(small.turns)
    assert "max_watch_streams_per_client" in details
    assert "the limit is 2" in details
    # A stream that ends gives its place back.
    streams.pop().cancel()
    for _ in range(50):
        try:
            streams.append(await open_watch(small.turns))
            break
        except aio.AioRpcError as exc:
            if exc.code() != EXHAUSTED:
                raise
            await asyncio.sleep(0.05)
    else:
        pytest.fail("a cancelled WatchTurn never gave its place back")
    for s in streams:
        s.cancel()


async def test_watch_streams_per_token(make_service: ServiceFactory, tmp_path: Path) -> None:
    # Readers of every turn (a panel watches only its own threads' turns).
    tokens = write_tokens(
        tmp_path / "tokens.jsonl", {"a": "operator", "b": "operator", "x": "admin"}
    )
    server = await make_service(limits=SMALL, tokens_file=tmp_path / "tokens.jsonl")
    async with aio.insecure_channel(server.address) as channel:
        stub: TurnServiceAsyncStub = turns_pb2_grpc.TurnServiceStub(channel)
        admin = bearer(tokens["x"])
        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t1", thread_id="th1", agent="agent", input=value(1)
            ),
            metadata=admin,
        )
        await stub.AppendEvents(append(*events(1, "step")), metadata=admin)
        held = [await open_watch(stub, bearer(tokens["a"])) for _ in range(2)]
        await watch_refused(stub, bearer(tokens["a"]))
        # Same peer, another token: its own quota.
        held.append(await open_watch(stub, bearer(tokens["b"])))
        for s in held:
            s.cancel()


def test_requests_in_this_file_are_real_messages() -> None:
    # Guards the helpers above against silently building the wrong type.
    assert isinstance(append(), message.Message)
    assert isinstance(put(), checkpoints_pb2.PutCheckpointRequest)
