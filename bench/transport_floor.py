"""The transport floor: what a remote saver's turn cannot go under on grpc.aio.

A RemoteSaver turn on its stream is seven round trips (a read, then a frame per
checkpoint). Here the same graph runs on LangGraph's in-process `InMemorySaver`
and, after it, sends seven frames of the sizes a RemoteSaver turn sends on a bare
grpc.aio stream to a process that answers each with a few bytes: no parsing, no
SQL, no commit. What a RemoteSaver turn costs above this is turnkeeper's own
work (the messages, the service's handlers, the writer, the commits), not the
transport's (bench/analysis.md, "Round four").

The blocking API's floor is the same with LangGraph's ``invoke`` and the frames as
blocking unary calls (:func:`blocking_floor_turn`).

`python -m bench.transport_floor` is that answering process; it prints its port.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import grpc
from grpc import aio
from langgraph.checkpoint.memory import InMemorySaver

from bench import turns

# The frames a 4-step RemoteSaver turn writes on its stream, in bytes: the read of
# the thread's checkpoint, then the step checkpoints with their writes (counted on
# the client with langgraph 1.2; docs/benchmarks.md names the version measured).
FRAMES = (44, 4741, 2782, 3141, 3292, 3437, 3463)
ANSWER = b"\x08\x01" * 8
_METHOD = "/bench.Echo/Stream"
_UNARY = "/bench.Echo/Call"


async def _answer(requests: AsyncIterator[bytes], context: Any) -> AsyncIterator[bytes]:
    async for _ in requests:
        yield ANSWER


async def _answer_one(request: bytes, context: Any) -> bytes:
    return ANSWER


async def _serve() -> None:
    server = aio.server()
    handlers = {
        "Stream": grpc.stream_stream_rpc_method_handler(_answer),
        "Call": grpc.unary_unary_rpc_method_handler(_answer_one),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", handlers),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(port, flush=True)
    await server.wait_for_termination()


@contextmanager
def answering_process() -> Iterator[str]:
    """The answering process, on a port the OS picked; yields its address."""
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.transport_floor"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = process.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError("the answering process did not start")
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        process.wait(timeout=10)


@asynccontextmanager
async def floor_turn(address: str) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """The floor's turn: the InMemorySaver turn, then its frames' round trips on one
    stream to the answering process at `address`, open while in the context."""
    frames = [b"\0" * size for size in FRAMES]
    graph_turn = turns.async_graph_turn(turns.build(InMemorySaver()))
    async with aio.insecure_channel(address) as channel:
        open_stream: Any = channel.stream_stream
        call = open_stream(_METHOD)()  # bytes in, bytes out: no (de)serializers

        async def turn() -> None:
            await graph_turn()
            for frame in frames:
                await call.write(frame)
                await call.read()

        try:
            yield turn
        finally:
            call.cancel()


@contextmanager
def blocking_floor_turn(address: str) -> Iterator[Callable[[], None]]:
    """The blocking API's floor: the InMemorySaver turn through ``invoke``, then the
    same frames as blocking unary calls, one after the other, to the answering
    process at `address`. A blocking RemoteSaver turn waits on as many calls one
    after the other: the read, then each checkpoint (a step's writes go in calls of
    their own beside it, on LangGraph's worker threads)."""
    frames = [b"\0" * size for size in FRAMES]
    graph_turn = turns.graph_turn(turns.build(InMemorySaver()))
    with grpc.insecure_channel(address) as channel:
        open_call: Any = channel.unary_unary
        call = open_call(_UNARY)  # bytes in, bytes out: no (de)serializers

        def turn() -> None:
            graph_turn()
            for frame in frames:
                call(frame)

        yield turn


if __name__ == "__main__":
    asyncio.run(_serve())
