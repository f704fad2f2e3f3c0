"""A directory made once per key in the machine's test cache,
~/.cache/turnkeeper-tests/<kind>/<key> (XDG_CACHE_HOME): the wheelhouse
(tests/support/wheelhouse.py) and the Node installs and builds
(tests/support/npm_cache.py). Made in a scratch directory renamed into place under the
key's file lock, so two xdist workers or two runs make it once and none sees half of
it; an entry not used for STALE_SECONDS is removed when another one is made.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

STALE_SECONDS = 14 * 24 * 3600


def cache_root(kind: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "turnkeeper-tests" / kind


def made_once(kind: str, key: str, make: Callable[[Path], object]) -> Path:
    """The cache's directory for `key`; made first if missing, by `make(scratch)`
    filling an empty scratch directory (removed if `make` raises)."""
    root = cache_root(kind)
    entry = root / key
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f".{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (entry / ".complete").is_file():
            _prune(root, keep=key)
            scratch = root / f"{key}.partial-{os.getpid()}"
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir()
            try:
                make(scratch)
            except BaseException:
                shutil.rmtree(scratch, ignore_errors=True)
                raise
            (scratch / ".complete").write_text(f"{key}\n")
            shutil.rmtree(entry, ignore_errors=True)
            scratch.rename(entry)
        os.utime(entry / ".complete")
    return entry


def _prune(root: Path, keep: str) -> None:
    cutoff = time.time() - STALE_SECONDS
    for entry in root.iterdir():
        if entry.name.startswith(".") or entry.name == keep:
            continue
        marker = entry / ".complete"
        stale = not marker.exists() or marker.stat().st_mtime < cutoff
        # A partial entry is another process's at work unless it is old.
        if ".partial-" in entry.name:
            stale = entry.stat().st_mtime < cutoff
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
