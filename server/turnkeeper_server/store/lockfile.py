"""One service per pair of SQLite files: an exclusive lock held for the service's life.

SQLite itself would let a second process open the files and write through its
own writer thread; the group commit and the fencing assume one writer. The lock
is `flock` on a file beside turns.db that holds the owner's pid, so the refusal
can name the other process. The kernel drops the lock when the process dies, even
by SIGKILL: a stale file never blocks a restart.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from pathlib import Path


class StoreInUse(RuntimeError):
    """Another process serves these files."""


class FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, guards: str) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            raise StoreInUse(
                f"{guards} is in use by another turnkeeper process ({holder}; lock file "
                f"{self.path}): stop it first, or give this one its own --data-dir. Two "
                "services on the same SQLite files would both write them."
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.ftruncate(self._fd, 0)
        os.close(self._fd)  # closing the descriptor releases the lock
        self._fd = None
