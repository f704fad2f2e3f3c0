"""What many tests of a module or a session share, served on an event loop of its own
in a thread (each test's loop is its own) and stopped when they end.

`LoopThread` is the thread: `start()` returns what its `serving()` yields once it
serves, `stop()` ends it. `ServiceThread` is a service alone, reached over gRPC (its
`address`); `tests/support/deployment.py`'s `SharedDeployment` is a whole LangGraph
API deployment. A test may not kill, restart or reconfigure what it shares, nor read
what the whole service holds (every test of the module writes to it): each works on
turns and threads of its own ids."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, Generic, TypeVar

from turnkeeper_server.app import create_server

from tests.support.service import make_settings

T = TypeVar("T")


class LoopThread(Generic[T]):
    """Serves `serving()` on a loop in a thread of its own, `timeout` to start."""

    def __init__(self, name: str, timeout: float = 60) -> None:
        self._timeout = timeout
        self._ready: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def serving(self) -> AbstractAsyncContextManager[T]:
        """What the thread serves, yielding once it serves; entered on its loop."""
        raise NotImplementedError

    def start(self) -> T:
        """What `serving()` yielded, once it did."""
        self._thread.start()
        try:
            return self._ready.result(timeout=self._timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Ends what started, a start still under way too (a test's timeout that
        interrupted `start()`): it is waited for first, then told to stop."""
        if self._thread.is_alive():
            concurrent.futures.wait([self._ready], timeout=self._timeout)
            if self._loop is not None and self._stop is not None:
                self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=60)

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # the starting thread raises it
            if not self._ready.done():
                self._ready.set_exception(error)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with self.serving() as served:
            self._ready.set_result(served)
            await self._stop.wait()


class ServiceThread(LoopThread[str]):
    """A service alone; `start()` returns once it serves at `address`."""

    def __init__(self, data_dir: Path, **overrides: Any) -> None:
        super().__init__("service-thread")
        self._settings = make_settings(data_dir, **overrides)
        self.address = ""

    def start(self) -> str:
        self.address = super().start()
        return self.address

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        service = await create_server(self._settings)
        try:
            yield service.address
        finally:
            await service.stop(0)
