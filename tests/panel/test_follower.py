"""The turn follower against a real service (docs/architecture.md §3, §8).

Turns are driven through the raw TurnService stubs, as an executor would; the
follower under test watches through its own client. Nothing is mocked: the only
addition is a client that records each TurnStatus answer, so a test can await
"the follower asked at an idle gap and kept waiting" instead of sleeping.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import pytest
from grpc import aio
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import TurnkeeperError
from turnkeeper.panel.follower import (
    Concluded,
    ConclusionReason,
    Event,
    FollowOptions,
    Frame,
    Reset,
    Transcript,
    TurnFollower,
    TurnState,
)
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.engine import watch

from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory, unrenewed
from tests.support.turns import events, start, value

if TYPE_CHECKING:
    # Only in the .pyi: what TurnServiceStub(channel) is for a grpc.aio channel.
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub as Stub

# Short enough that a test sees several idle gaps in well under a second.
FAST = FollowOptions(idle_gap=0.1, call_timeout=0.5, reconnect_initial=0.02, reconnect_max=0.2)


class ObservedClient(AsyncTurnkeeperClient):
    """The real client, recording each TurnStatus outcome (None: unreachable)."""

    def __init__(self, target: str) -> None:
        super().__init__(ConnectionOptions(target=target))
        self.statuses: list[TurnState | None] = []
        self._changed = asyncio.Event()

    async def turn_status(
        self, request: pb.TurnStatusRequest, *, timeout: float | None = None
    ) -> pb.TurnStatusResponse:
        try:
            response = await super().turn_status(request, timeout=timeout)
        except TurnkeeperError:
            self.statuses.append(None)
            self._changed.set()
            raise
        self.statuses.append(TurnState.from_proto(response.state))
        self._changed.set()
        return response

    async def wait_for(self, predicate: Callable[[list[TurnState | None]], bool]) -> None:
        async def loop() -> None:
            while not predicate(self.statuses):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), 10)


class Consumer:
    """Applies the follower's frames to a Transcript, as a panel would."""

    def __init__(self, follower: TurnFollower) -> None:
        self.follower = follower
        self.transcript = Transcript()
        self.frames: list[Frame] = []
        self._changed = asyncio.Event()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for frame in self.follower:
            self.frames.append(frame)
            self.transcript.apply(frame)
            self._changed.set()
        self._changed.set()

    async def wait_for(self, predicate: Callable[[Transcript], bool]) -> None:
        async def loop() -> None:
            while not predicate(self.transcript):
                if self.task.done():
                    self.task.result()
                    raise AssertionError(f"follower ended first: {self.transcript}")
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), 10)

    async def finished(self) -> Transcript:
        await asyncio.wait_for(self.task, 10)
        return self.transcript

    async def close(self) -> None:
        await self.follower.aclose()
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


@pytest.fixture
async def svc(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    # Leases far longer than a test: the reaper must not re-drive a turn that this
    # test's "executor" keeps quiet on purpose.
    return await make_service(nats_url=nats_server.url, **unrenewed(claims=True))


@pytest.fixture
async def stub(svc: TurnkeeperServer) -> AsyncIterator[Stub]:
    async with aio.insecure_channel(svc.address) as ch:
        yield turns_pb2_grpc.TurnServiceStub(ch)


@pytest.fixture
async def client(svc: TurnkeeperServer) -> AsyncIterator[ObservedClient]:
    async with ObservedClient(svc.address) as c:
        yield c


def follow(client: AsyncTurnkeeperClient, turn_id: str = "t1", **options: Any) -> Consumer:
    opts = FollowOptions(**{**_fields(FAST), **options})
    return Consumer(TurnFollower(client, turn_id, opts))


def _fields(options: FollowOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in options.__dataclass_fields__}


async def append(stub: Stub, turn_id: str, attempt: int, first: int, *types: str) -> None:
    await stub.AppendEvents(
        pb.AppendEventsRequest(turn_id=turn_id, attempt=attempt, events=events(first, *types))
    )


async def finish(stub: Stub, turn_id: str, attempt: int) -> None:
    await stub.FinishTurn(
        pb.FinishTurnRequest(turn_id=turn_id, attempt=attempt, outcome=pb.OUTCOME_DONE)
    )


def checkpoint(thread_id: str, turn_id: str, attempt: int, cid: str) -> cpb.PutCheckpointRequest:
    return cpb.PutCheckpointRequest(
        thread_id=thread_id,
        checkpoint_id=cid,
        checkpoint=cpb.TypedValue(type="json", data=b"{}"),
        metadata_json=json.dumps({"step": 1}),
        fence=cpb.TurnFence(turn_id=turn_id, attempt=attempt),
    )


TYPES_BEFORE = ("step", "token", "tool_call_start")  # then a checkpoint: boundary 3
TYPES_AFTER = ("tool_call_end", "final")  # lost on a crash, written again after


async def uninterrupted(stub: Stub, client: AsyncTurnkeeperClient) -> Transcript:
    """The same turn as the rewind tests, run without a crash, on its own thread."""
    await start(stub, turn_id="ref", thread_id="th-ref")
    consumer = follow(client, "ref")
    await append(stub, "ref", 0, 1, *TYPES_BEFORE, *TYPES_AFTER)
    await finish(stub, "ref", 0)
    transcript = await consumer.finished()
    assert transcript.resets == 0
    return transcript


async def first_attempt(stub: Stub, channel: aio.Channel) -> None:
    """t1's first attempt as far as a crash leaves it: TYPES_BEFORE, the checkpoint
    after them (boundary 3), then TYPES_AFTER (seq 4 and 5, lost to a rewind)."""
    await append(stub, "t1", 0, 1, *TYPES_BEFORE)
    await checkpoints_pb2_grpc.CheckpointServiceStub(channel).PutCheckpoint(
        checkpoint("th1", "t1", 0, "1ef-0001")
    )
    await append(stub, "t1", 0, 4, *TYPES_AFTER)


async def followed_then_cut_off(
    svc: TurnkeeperServer, client: ObservedClient
) -> tuple[Transcript, Consumer]:
    """The reference run, then t1's first attempt followed to its fifth event; then
    the service goes away, and the follower has seen it gone."""
    async with aio.insecure_channel(svc.address) as ch:
        stub = turns_pb2_grpc.TurnServiceStub(ch)
        reference = await uninterrupted(stub, client)
        await start(stub)
        await first_attempt(stub, ch)
    consumer = follow(client)
    await consumer.wait_for(lambda t: len(t.events) == 5)
    await svc.stop(0)
    await client.wait_for(lambda s: None in s)
    return reference, consumer


async def test_follows_a_turn_to_its_terminal_event(stub: Stub, client: ObservedClient) -> None:
    await start(stub)
    await append(stub, "t1", 0, 1, "step", "token")
    consumer = follow(client)
    await consumer.wait_for(lambda t: len(t.events) == 2)  # the replay
    await append(stub, "t1", 0, 3, "final")  # live
    await finish(stub, "t1", 0)

    transcript = await consumer.finished()
    assert [(e.seq, e.type) for e in transcript.events] == [
        (1, "step"),
        (2, "token"),
        (3, "final"),
        (4, "turn.done"),
    ]
    assert transcript.events[0].data == {"n": 1}
    assert transcript.concluded == Concluded(ConclusionReason.TERMINAL_EVENT, TurnState.DONE)
    assert isinstance(consumer.frames[-1], Concluded)


async def test_a_running_turn_quiet_past_the_idle_gap_is_not_concluded(
    stub: Stub, client: ObservedClient
) -> None:
    await start(stub)
    await append(stub, "t1", 0, 1, "step")
    consumer = follow(client)
    # A slow step: three idle gaps, each answered RUNNING, and the follower waits on.
    await client.wait_for(lambda s: s.count(TurnState.RUNNING) >= 3)
    assert not consumer.transcript.finished and not consumer.task.done()

    await append(stub, "t1", 0, 2, "final")
    await finish(stub, "t1", 0)
    transcript = await consumer.finished()
    assert [e.type for e in transcript.events] == ["step", "final", "turn.done"]
    assert transcript.concluded is not None
    assert transcript.concluded.reason is ConclusionReason.TERMINAL_EVENT


async def test_a_parked_turn_is_not_concluded(stub: Stub, client: ObservedClient) -> None:
    await start(stub)
    await stub.ParkTurn(
        pb.ParkTurnRequest(
            turn_id="t1", attempt=0, interrupt=value({"ask": "ok?"}), events=events(1, "interrupt")
        )
    )
    consumer = follow(client)
    await client.wait_for(lambda s: s.count(TurnState.PARKED) >= 3)
    assert [e.type for e in consumer.transcript.events] == ["interrupt"]
    assert not consumer.transcript.finished and not consumer.task.done()

    # Resumed (no replica takes the hand-off: the turn waits RUNNING), then finished.
    await stub.ResumeDetached(pb.ResumeDetachedRequest(turn_id="t1", resume=value(True)))
    await finish(stub, "t1", 0)
    transcript = await consumer.finished()
    assert [e.type for e in transcript.events] == ["interrupt", "turn.done"]
    assert transcript.resets == 0


async def test_an_unreachable_service_is_not_taken_as_the_end(
    svc: TurnkeeperServer, make_service: ServiceFactory, nats_server: NatsServer
) -> None:
    async with ObservedClient(svc.address) as client:
        async with aio.insecure_channel(svc.address) as ch:
            stub = turns_pb2_grpc.TurnServiceStub(ch)
            await start(stub)
            await append(stub, "t1", 0, 1, "step", "token")
        consumer = follow(client)
        await consumer.wait_for(lambda t: len(t.events) == 2)

        await svc.stop(0)
        # The stream dropped, and idle gaps found no service: still following.
        await client.wait_for(lambda s: s.count(None) >= 2)
        assert not consumer.task.done()

        # A new service on the same data dir and port: the follower picks up after seq 2.
        again = await make_service(nats_url=nats_server.url, listen=svc.address, **unrenewed())
        async with aio.insecure_channel(again.address) as ch:
            stub = turns_pb2_grpc.TurnServiceStub(ch)
            await append(stub, "t1", 0, 3, "final")
            await finish(stub, "t1", 0)
        transcript = await consumer.finished()
    assert [(e.seq, e.type) for e in transcript.events] == [
        (1, "step"),
        (2, "token"),
        (3, "final"),
        (4, "turn.done"),
    ]
    assert transcript.resets == 0


async def test_a_turn_running_past_the_deadline_ends_by_the_deadline(
    stub: Stub, client: ObservedClient
) -> None:
    await start(stub)
    await append(stub, "t1", 0, 1, "step")
    loop = asyncio.get_running_loop()
    began = loop.time()
    consumer = follow(client, deadline=0.5)
    transcript = await consumer.finished()
    assert loop.time() - began >= 0.5
    assert transcript.concluded == Concluded(ConclusionReason.DEADLINE, TurnState.RUNNING)
    assert TurnState.RUNNING in client.statuses  # it did ask, and was told RUNNING
    assert [e.type for e in transcript.events] == ["step"]


async def test_an_unknown_turn_concludes_unknown(client: ObservedClient) -> None:
    transcript = await follow(client, "never-started").finished()
    assert transcript.concluded == Concluded(ConclusionReason.STATUS, TurnState.UNKNOWN)
    assert transcript.events == []


async def test_a_rewind_gives_one_reset_and_the_uninterrupted_transcript(
    svc: TurnkeeperServer, stub: Stub, client: ObservedClient
) -> None:
    reference = await uninterrupted(stub, client)
    async with aio.insecure_channel(svc.address) as ch:
        await start(stub)
        # A long idle gap: the stream's own reset is what this test is about.
        consumer = follow(client, idle_gap=5.0)
        await first_attempt(stub, ch)
        await consumer.wait_for(lambda t: len(t.events) == 5)

        # The agent restarts: the turn is re-driven from the checkpoint (boundary 3).
        await stub.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
        await append(stub, "t1", 1, 4, *TYPES_AFTER)
        await finish(stub, "t1", 1)
        transcript = await consumer.finished()

    assert transcript.resets == 1
    resets = [f for f in consumer.frames if isinstance(f, Reset)]
    assert resets == [Reset(seq=3, attempt=1, checkpoint_id="1ef-0001")]
    assert transcript.content() == reference.content()
    assert [e.attempt for e in transcript.events] == [0, 0, 0, 1, 1, 1]


async def test_a_rewind_while_disconnected_gives_one_local_reset(
    svc: TurnkeeperServer, make_service: ServiceFactory, nats_server: NatsServer
) -> None:
    async with ObservedClient(svc.address) as client:
        reference, consumer = await followed_then_cut_off(svc, client)
        # While the follower cannot reach the service, the turn is re-driven (by a
        # service on another port, so no stream of the follower's is open) and the
        # new attempt gets as far as the old one had.
        elsewhere = await make_service(nats_url=nats_server.url, **unrenewed())
        async with aio.insecure_channel(elsewhere.address) as ch:
            stub = turns_pb2_grpc.TurnServiceStub(ch)
            await stub.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
            await append(stub, "t1", 1, 4, *TYPES_AFTER)
        await elsewhere.stop(0)
        assert not consumer.task.done() and consumer.transcript.resets == 0

        # Back on the follower's port: the overlap event (seq 5) is another attempt's.
        again = await make_service(nats_url=nats_server.url, listen=svc.address, **unrenewed())
        await consumer.wait_for(lambda t: t.resets == 1 and len(t.events) == 5)
        async with aio.insecure_channel(again.address) as ch:
            await finish(turns_pb2_grpc.TurnServiceStub(ch), "t1", 1)
        transcript = await consumer.finished()

    assert [f for f in consumer.frames if isinstance(f, Reset)] == [Reset(local=True)]
    assert transcript.content() == reference.content()
    assert [e.attempt for e in transcript.events] == [0, 0, 0, 1, 1, 1]


@pytest.mark.parametrize("stream_resets", [False, True], ids=["before-630", "stream-reset"])
async def test_a_rewind_while_cut_off_gives_one_reset_from_the_stream_or_an_idle_gap(
    svc: TurnkeeperServer,
    make_service: ServiceFactory,
    nats_server: NatsServer,
    monkeypatch: pytest.MonkeyPatch,
    stream_resets: bool,
) -> None:
    if not stream_resets:
        # A service of before decision 630: a stream re-opened past a rewound end
        # says nothing of the rewind.
        monkeypatch.setattr(
            watch,
            "taken_back",
            lambda turn, events, cursor, epoch: epoch is not None and turn.rewinds != epoch,
        )
    async with ObservedClient(svc.address) as client:
        reference, consumer = await followed_then_cut_off(svc, client)
        # Re-driven while the follower is cut off, and the new attempt has written
        # nothing yet: the re-opened stream (after seq 5) has no event to compare;
        # its service resets it at once, its position being past the rewound end
        # (decision 630); before that only TurnStatus at an idle gap said so
        # (last_seq 3, fewer than the 5 shown).
        elsewhere = await make_service(nats_url=nats_server.url, **unrenewed())
        async with aio.insecure_channel(elsewhere.address) as ch:
            await turns_pb2_grpc.TurnServiceStub(ch).Redrive(
                pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2")
            )
        await elsewhere.stop(0)
        again = await make_service(nats_url=nats_server.url, listen=svc.address, **unrenewed())
        await consumer.wait_for(lambda t: t.resets == 1 and len(t.events) == 3)
        async with aio.insecure_channel(again.address) as ch:
            stub = turns_pb2_grpc.TurnServiceStub(ch)
            await append(stub, "t1", 1, 4, *TYPES_AFTER)
            await finish(stub, "t1", 1)
        transcript = await consumer.finished()

    resets = [f for f in consumer.frames if isinstance(f, Reset)]
    if stream_resets:
        # Whichever tells first: the re-opened stream, or TurnStatus at an idle gap
        # while no stream is open yet (decision 160); never both.
        assert resets in (
            [Reset(seq=3, attempt=1, checkpoint_id="1ef-0001")],
            [Reset(local=True)],
        )
    else:
        assert resets == [Reset(local=True)]
    assert transcript.content() == reference.content()


class OvertakenClient(ObservedClient):
    """A stream slower than the status call: WatchTurn's reset frame is held until
    a TurnStatus call made after it arrived has answered `until`."""

    def __init__(self, target: str, until: TurnState) -> None:
        super().__init__(target)
        self.until = until
        self.held = 0

    def watch_turn(
        self, request: pb.WatchTurnRequest, *, timeout: float | None = None
    ) -> AsyncIterator[pb.WatchTurnResponse]:
        return self._held_back(super().watch_turn(request, timeout=timeout))

    async def _held_back(
        self, stream: AsyncIterator[pb.WatchTurnResponse]
    ) -> AsyncIterator[pb.WatchTurnResponse]:
        async for response in stream:
            if response.HasField("reset"):
                self.held += 1
                await self.wait_for(partial(self._answered_since, len(self.statuses)))
            yield response

    def _answered_since(self, asked: int, statuses: list[TurnState | None]) -> bool:
        return self.until in statuses[asked:]


@pytest.mark.parametrize("then", ["running", "done"])
async def test_a_reset_overtaken_by_the_status_call_is_still_the_services(
    svc: TurnkeeperServer, stub: Stub, then: str
) -> None:
    """TurnStatus shows the rewind (the new attempt still short of what was shown,
    or already done) while the service's reset is still on the open stream: the
    follower waits for the reset instead of resetting on its own."""
    until = TurnState.RUNNING if then == "running" else TurnState.DONE
    async with (
        OvertakenClient(svc.address, until) as client,
        aio.insecure_channel(svc.address) as ch,
    ):
        reference = await uninterrupted(stub, client)
        await start(stub)
        # "done": a gap long enough that the new attempt finishes inside it.
        consumer = follow(client, idle_gap=0.1 if then == "running" else 2.0)
        await first_attempt(stub, ch)
        await consumer.wait_for(lambda t: len(t.events) == 5)

        await stub.Redrive(pb.RedriveRequest(agent="agent", replica="r1", incarnation="i2"))
        if then == "running":
            # TurnStatus says last_seq 3, fewer than the 5 shown, with the reset held.
            await consumer.wait_for(lambda t: t.resets == 1)
        await append(stub, "t1", 1, 4, *TYPES_AFTER)
        await finish(stub, "t1", 1)
        transcript = await consumer.finished()

    assert client.held == 1
    assert [f for f in consumer.frames if isinstance(f, Reset)] == [
        Reset(seq=3, attempt=1, checkpoint_id="1ef-0001")
    ]
    assert transcript.content() == reference.content()
    assert transcript.concluded == Concluded(ConclusionReason.TERMINAL_EVENT, TurnState.DONE)


def test_transcript_applies_frames_and_a_reset_clears() -> None:
    transcript = Transcript()
    transcript.extend(
        [
            Event(1, 0, "token", {"t": "a"}),
            Event(2, 0, "tool_call_start", {"id": "x"}),
            Reset(seq=1, attempt=1),
            Event(1, 0, "token", {"t": "a"}),
            Event(2, 1, "tool_call_start", {"id": "x"}),
            Event(3, 1, "turn.done", {}),
            Concluded(ConclusionReason.TERMINAL_EVENT, TurnState.DONE),
        ]
    )
    assert transcript.resets == 1
    assert transcript.content() == [
        (1, "token", {"t": "a"}),
        (2, "tool_call_start", {"id": "x"}),
        (3, "turn.done", {}),
    ]
    assert transcript.finished and transcript.events[-1].terminal


def test_options_must_be_positive() -> None:
    with pytest.raises(ValueError, match="idle_gap"):
        FollowOptions(idle_gap=0)
