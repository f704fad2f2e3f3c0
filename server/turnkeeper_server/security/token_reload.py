"""Tokens that change without a restart.

The tokens file is read again on SIGHUP (`turnkeeper serve` installs the handler)
and when it changes: a poll of its (inode, size, mtime) every `tokens_poll_seconds`,
which sees an edit in place and an atomic rename alike. A new token works from its
next call. A revoked token (or one whose role changed) is refused on its next call,
and its open response streams (WatchTurn) end with UNAUTHENTICATED.

A file that no longer parses, or holds no tokens, is refused: the service keeps the
tokens it has and logs why (a half-written file must not lock everyone out or let
anyone in). Each reload is reported to `on_reload` (the audit log).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from turnkeeper_server.periodic import Periodic
from turnkeeper_server.security.auth import TokenStore
from turnkeeper_server.security.streams import OpenStreams

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reload:
    """What one reload did."""

    trigger: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    streams_ended: int = 0
    # Why the file was refused; empty when it was taken.
    error: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.added or self.removed or self.error)

    def describe(self) -> str:
        if self.error:
            return f"refused, the old tokens stay: {self.error}"
        parts = [
            f"added {', '.join(self.added) or 'none'}",
            f"removed {', '.join(self.removed) or 'none'}",
        ]
        if self.streams_ended:
            parts.append(f"{self.streams_ended} open streams ended")
        return "; ".join(parts)


def _stamp(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


class TokenReloader:
    def __init__(
        self,
        path: Path,
        tokens: TokenStore,
        streams: OpenStreams,
        *,
        poll_seconds: float = 1.0,
        on_reload: Callable[[Reload], None] | None = None,
    ) -> None:
        self.path = path
        self.tokens = tokens
        self.streams = streams
        self.poll_seconds = poll_seconds
        self.on_reload = on_reload
        self._stamp = _stamp(path)
        self._periodic = Periodic("tokens-file-poll", poll_seconds, self._poll, log)

    def reload(self, trigger: str) -> Reload:
        """Read the file now; take it if it is valid."""
        self._stamp = _stamp(self.path)
        try:
            fresh = TokenStore.load(self.path)
        except ValueError as exc:
            result = Reload(trigger, error=str(exc))
            log.error("tokens file %s (%s): %s", self.path, trigger, result.describe())
        else:
            before, after = self.tokens.names(), fresh.names()
            self.tokens.replace(fresh)
            # Changed roles count as removed and added: the old grant is gone.
            removed = [c for d, c in before.items() if after.get(d) != c]
            added = [c for d, c in after.items() if before.get(d) != c]
            ended = self.streams.end(self.tokens.accepts)
            result = Reload(
                trigger,
                added=sorted(str(c) for c in added),
                removed=sorted(str(c) for c in removed),
                streams_ended=ended,
            )
            log.info("tokens file %s reloaded (%s): %s", self.path, trigger, result.describe())
        if self.on_reload is not None and result.changed:
            self.on_reload(result)
        return result

    async def start(self) -> None:
        if self.poll_seconds > 0:
            self._periodic.start()

    async def _poll(self) -> None:
        stamp = _stamp(self.path)
        if stamp is not None and stamp != self._stamp:
            self.reload("file changed")

    async def stop(self) -> None:
        await self._periodic.stop()
