"""`npm ci` for the tests' copies of Node packages, made once per lockfile (decision
460), as tests/support/wheelhouse.py does for wheels.

Each copy (clients/node, the differential's JS clients and LangGraph.js reference, the
JS SDK scripts, the bundled pages) used to run `npm ci` of its own, per session and
per xdist worker: seconds each under load, 161 MB and 11,000 files for LangGraph.js's
dev server. `npm_ci(package)` (tests/support/node.py) runs `npm ci` once per key in a directory of its own
under ~/.cache/turnkeeper-tests/node_modules (tests/support/made_once.py: once per key,
under a file lock, for every worker and run), and gives the copy hard links to it (a copy
where the cache is on another file system). The key is the package's package.json,
package-lock.json and .npmrc with node's and npm's versions: what is installed is
still decided by the lockfile, and a changed lockfile makes a new install.

A test must not rewrite a file of node_modules in place (it would rewrite the
cache's); npm, esbuild and Vite only add files, which stay the copy's.

`cached_output(package, ...)` does the same for a build (clients/node's `npm run
build`, its dist/): keyed by every file of the package but node_modules and the
output, kept once, and copied (not linked: a test may edit the copy).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from tests.support.made_once import made_once

# What `npm ci` reads of a package (its root has no install scripts of its own).
KEYED = ("package.json", "package-lock.json", ".npmrc")


def cache_key(package: Path, tools: str) -> str:
    """An install's key: the files `npm ci` reads, and the tools' versions."""
    digest = hashlib.sha256(tools.encode())
    for name in KEYED:
        path = package / name
        digest.update(f"\0{name}\0".encode())
        digest.update(path.read_bytes() if path.is_file() else b"(none)")
    return digest.hexdigest()[:16]


def link_node_modules(package: Path, tools: str, install: Callable[[Path], object]) -> None:
    """package/node_modules as `install` (`npm ci`, with `tools` its node's and npm's
    versions) makes it, from the cache; `install` runs in a scratch directory holding
    the KEYED files when the cache has no such install yet."""

    def make(scratch: Path) -> None:
        for name in KEYED:
            if (package / name).is_file():
                shutil.copy2(package / name, scratch / name)
        install(scratch)

    entry = made_once("node_modules", cache_key(package, tools), make)
    shutil.rmtree(package / "node_modules", ignore_errors=True)
    shutil.copytree(
        entry / "node_modules", package / "node_modules", symlinks=True, copy_function=_link
    )


def cached_output(
    package: Path, tools: str, build: Callable[[Path], object], output: str = "dist"
) -> None:
    """package/`output` as `build(package)` makes it: copied from the cache when a
    build of the same files (all of the package's but node_modules and `output`) with
    the same tools was made before, else built here and kept."""
    digest = hashlib.sha256(f"{tools}\0build {output}".encode())
    for folder, dirs, files in os.walk(package):
        if Path(folder) == package:
            dirs[:] = [d for d in dirs if d not in ("node_modules", output)]
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            digest.update(f"\0{path.relative_to(package)}\0".encode())
            digest.update(path.read_bytes())

    def make(scratch: Path) -> None:
        build(package)
        shutil.copytree(package / output, scratch / output, symlinks=True)

    entry = made_once("node_modules", f"build-{digest.hexdigest()[:16]}", make)
    shutil.rmtree(package / output, ignore_errors=True)
    shutil.copytree(entry / output, package / output, symlinks=True)


def _link(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another file system: a copy
        shutil.copy2(source, target)
