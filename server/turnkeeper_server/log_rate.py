"""Log lines at a bounded rate: a flood of one kind of event (refused connections,
failed accepts, oversized announcements) is one line per interval with a count, so
the log stays small however fast the events come (decision 274).

    refused = LogRate(log, interval=1.0)
    refused.warning("refused a connection from %s", peer)   # at most 1 line a second
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class LogRate:
    """One line per `interval` seconds; the events in between are counted, and the
    next line says how many there were."""

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self.total = 0
        self._unlogged = 0
        self._last: float | None = None

    def log(self, level: int, msg: str, *args: object) -> bool:
        """Log `msg` unless a line went out less than `interval` ago; True if it did."""
        self.total += 1
        now = self.clock()
        if self._last is not None and now - self._last < self.interval:
            self._unlogged += 1
            return False
        if self._unlogged:
            msg += f" (and {self._unlogged} more like it since the last such line)"
        self._last = now
        self._unlogged = 0
        self.logger.log(level, msg, *args)
        return True

    def warning(self, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, msg, *args)

    def error(self, msg: str, *args: object) -> bool:
        return self.log(logging.ERROR, msg, *args)
