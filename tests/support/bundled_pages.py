"""A React page of the tests (a panel, a useStream page), installed from its lock file
and bundled with esbuild in a copy, and served from a static origin of its own (not
the API's: the browser then talks to the API across origins, as a real panel does)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.node import NODE, npm_ci, npm_run


def build(source: Path, into: Path) -> Path:
    """`source` copied to `into` (without node_modules or dist), installed and built;
    skips where node or npm is missing."""
    if NODE is None or shutil.which("npm") is None:
        pytest.skip(reason="node and npm are not on PATH: the page cannot be built")
    shutil.copytree(source, into, ignore=shutil.ignore_patterns("node_modules", "dist"))
    npm_ci(into)
    npm_run(["run", "build"], into)
    return into


@contextlib.asynccontextmanager
async def static_origin(root: Path) -> AsyncIterator[str]:
    """`root` served on 127.0.0.1 at a free port; yields its origin."""
    app = web.Application()
    app.router.add_static("/", root)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
