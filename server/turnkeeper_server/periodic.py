"""A pass run every so often in the background, until stopped: the lease reaper, the
retention sweeper and the tokens-file poll are each one.

A pass that raises is logged with the task's name and the next one runs on time:
a transient fault (the database away for a moment) must not end the task for the
life of the process. The first pass runs one interval after `start`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable


class Periodic:
    def __init__(
        self,
        name: str,
        interval: float,
        run_pass: Callable[[], Awaitable[None]],
        log: logging.Logger,
    ) -> None:
        self.name = name
        self.interval = interval
        self.run_pass = run_pass
        self.log = log
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self._task is not None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=self.name)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.exception("%s pass failed; retrying next interval", self.name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
