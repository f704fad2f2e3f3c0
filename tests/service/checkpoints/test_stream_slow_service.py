"""A checkpoint stream's deadline tells a slow service from a lost one (issue 51,
decision 385): an answer later than ``default_timeout`` is waited for while the
service answers other calls (the bridge's heartbeats), and fails at the deadline as
before when it answers nothing."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from turnkeeper import errors
from turnkeeper.agent.saver import STREAM_ENV, RemoteSaver, _stream
from turnkeeper.agent.saver._stream import heard_from
from turnkeeper.client import ConnectionOptions
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.rpc.checkpoint_stream import StreamingCheckpointServicer

pytestmark = [pytest.mark.timeout(60)]

# A deadline well over what a loaded machine holds a loop for: with 0.3 s, a clean-clone
# CI under load held this process's loop 0.4 s ("the service's event loop was held"),
# the deadline passed with nothing heard for longer, and the late answer failed.
TIMEOUT = 1.0
# The service's first answer comes this late: several deadlines.
DELAY = 3 * TIMEOUT


@pytest.fixture
def slow_first_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STREAM_ENV, "1")
    answer = StreamingCheckpointServicer._answer
    delayed: list[bool] = []

    async def late(self: StreamingCheckpointServicer, *args: Any, **kwargs: Any) -> Any:
        if not delayed:
            delayed.append(True)
            await asyncio.sleep(DELAY)  # the saturated machine, played by the service
        return await answer(self, *args, **kwargs)

    monkeypatch.setattr(StreamingCheckpointServicer, "_answer", late)


@contextlib.asynccontextmanager
async def answering(target: str) -> AsyncIterator[None]:
    """What the bridge's lease thread says while the service at `target` answers its
    heartbeats, for the length of the block: from a thread, as the lease thread's,
    so a held event loop does not hold the heartbeats too."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.is_set():
            heard_from(target)
            stop.wait(TIMEOUT / 5)

    thread = threading.Thread(target=beat, name="heartbeats", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        await asyncio.to_thread(thread.join)


@pytest.fixture
async def heartbeats(service: TurnkeeperServer) -> AsyncIterator[None]:
    async with answering(service.address):
        yield


@pytest.mark.usefixtures("slow_first_answer", "heartbeats")
async def test_a_late_answer_is_waited_for_while_the_service_answers_others(
    service: TurnkeeperServer,
) -> None:
    options = ConnectionOptions(target=service.address, default_timeout=TIMEOUT)
    async with RemoteSaver(options=options) as saver:
        assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None


@pytest.mark.usefixtures("slow_first_answer")
async def test_a_late_answer_from_a_service_that_answers_nothing_fails_at_the_deadline(
    service: TurnkeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_stream, "_heard", {})  # nothing heard from anyone
    options = ConnectionOptions(target=service.address, default_timeout=TIMEOUT)
    async with RemoteSaver(options=options) as saver:
        with pytest.raises(errors.TurnkeeperError) as info:
            await saver.aget_tuple({"configurable": {"thread_id": "t"}})
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    assert "checkpoint stream" in info.value.message


async def test_a_write_a_slow_service_does_not_take_yet_is_waited_for_while_it_answers_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The write is bounded the same way: a service that takes the connection and says
    nothing yet (its loop saturated) holds the message's write, which waits while the
    service answers others (here, heartbeats for its address), MAX_EXTENSIONS times,
    and fails at the deadline after that."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # takes the connection, answers nothing
        writer.close()

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    target = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"

    options = ConnectionOptions(target=target, default_timeout=TIMEOUT)
    try:
        async with answering(target), RemoteSaver(options=options) as saver:
            with pytest.raises(errors.TurnkeeperError) as info:
                await saver.aget_tuple({"configurable": {"thread_id": "t"}})
    finally:
        server.close()
    assert info.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
    waited = [r for r in caplog.records if "answers other calls" in r.getMessage()]
    assert len(waited) == _stream.MAX_EXTENSIONS, [r.getMessage() for r in waited]
