"""Single turns measured in alternation: a few turns of every variant, then again.

A single turn takes 8-20 ms here, and this shared VM's speed changes by 2-3x within
minutes (bench/analysis.md, round ten). Measured one variant after another (200
turns of one, then 200 of the next), a variant and its baseline fall in different
phases of the machine, and one run's ratio says more about the phases than about
the code: the same two variants gave 1.53x to 2.24x within a few minutes that way,
and 1.54x to 1.69x in alternation (decision 163). So :func:`alternate`
runs `blocks` blocks; a block runs `per_block` turns of every variant, in an order
that reverses from block to block. A variant's figure is the median of all its
turns, a ratio the median of the blocks' ratios (:func:`block_medians` with
``paired_ratio``): each block's ratio compares turns run within a second of each
other.

Async variants run on an event loop of their own thread (:class:`AsyncHost`), timed
on that loop, so the hop from the timing thread is not in their figures.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, contextmanager
from typing import Any, TypeVar

from bench.common import median

T = TypeVar("T")

# Runs n turns one after the other; answers each turn's seconds.
Timed = Callable[[int], list[float]]


def blocking(turn: Callable[[], None]) -> Timed:
    """A blocking turn, timed on the calling thread."""

    def timed(count: int) -> list[float]:
        times = []
        for _ in range(count):
            started = time.perf_counter()
            turn()
            times.append(time.perf_counter() - started)
        return times

    return timed


class AsyncHost:
    """An event loop on a thread of its own, for async turns between blocking ones."""

    def __init__(self, loop: asyncio.AbstractEventLoop, stack: AsyncExitStack) -> None:
        self._loop = loop
        self._stack = stack

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def enter(self, manager: AbstractAsyncContextManager[T]) -> T:
        """Enter `manager` on the loop; it is left when the host closes."""
        return self.call(self._stack.enter_async_context(manager))

    def timed(self, turn: Callable[[], Awaitable[None]]) -> Timed:
        """An async turn, timed on the host's loop."""

        async def times(count: int) -> list[float]:
            measured = []
            for _ in range(count):
                started = time.perf_counter()
                await turn()
                measured.append(time.perf_counter() - started)
            return measured

        return lambda count: self.call(times(count))


async def _cancel_the_rest() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


@contextmanager
def async_host() -> Iterator[AsyncHost]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="bench-async-host", daemon=True)
    thread.start()
    stack = AsyncExitStack()
    host = AsyncHost(loop, stack)
    try:
        yield host
    finally:
        try:
            host.call(stack.aclose())
            # What the closed channels left running ends here, as asyncio.run does.
            host.call(_cancel_the_rest())
            host.call(loop.shutdown_asyncgens())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()


def alternate(
    variants: Mapping[str, Timed], blocks: int, per_block: int
) -> dict[str, list[list[float]]]:
    """Every variant's turn times, block by block (after one warm-up turn each)."""
    for timed in variants.values():
        timed(1)
    measured: dict[str, list[list[float]]] = {name: [] for name in variants}
    names = list(variants)
    for block in range(blocks):
        for name in names if block % 2 == 0 else reversed(names):
            measured[name].append(variants[name](per_block))
    return measured


def block_medians(blocks: list[list[float]]) -> list[float]:
    """Each block's median turn: the values ``paired_ratio`` pairs block by block."""
    return [median(block) for block in blocks]


def overall(blocks: list[list[float]]) -> float:
    """The median of every turn of the variant."""
    return median([t for block in blocks for t in block])
