"""A service that many tests of a module share: started once, on an event loop of its
own in a thread (each test's loop is its own), and stopped when the module ends.
A test reaches it over gRPC alone (its `address`); it may not kill, restart or
reconfigure it, nor read what the whole service holds (every test of the worker's
module writes to it): each works on turns and threads of its own ids."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from pathlib import Path
from typing import Any

from turnkeeper_server.app import create_server

from tests.support.service import make_settings


class ServiceThread:
    """`start()` returns once the service serves at `address`; `stop()` ends it."""

    def __init__(self, data_dir: Path, **overrides: Any) -> None:
        self._settings = make_settings(data_dir, **overrides)
        self._ready: concurrent.futures.Future[str] = concurrent.futures.Future()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="service-thread", daemon=True)
        self.address = ""

    def start(self) -> None:
        self._thread.start()
        try:
            self.address = self._ready.result(timeout=60)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Ends what started, a start still under way too (waited for first)."""
        if self._thread.is_alive():
            concurrent.futures.wait([self._ready], timeout=60)
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
        service = await create_server(self._settings)
        try:
            self._ready.set_result(service.address)
            await self._stop.wait()
        finally:
            await service.stop(0)
