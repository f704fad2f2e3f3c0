"""Where a service on this machine says its NATS is (decision 306).

`turnkeeper serve` (and `turnkeeper dev`) start a bundled nats-server on a port the
OS picks, so no agent can guess it. The service writes one small file per gRPC port,
``service-<port>.json`` (``{"address", "nats_url", "pid"}``), in a directory only its
user can use: ``$XDG_RUNTIME_DIR/turnkeeper``, else ``<temp dir>/turnkeeper-<uid>``;
and removes it when it stops. An agent told no NATS URL (``NATS_URL``,
``TURNKEEPER_NATS_URL``) whose service address is on this machine (a loopback host)
reads the file of that port, and takes the URL if the process that wrote it is still
alive. Anything else (a service elsewhere, no file, a stale one, a file or folder
another user owns) finds nothing, and the agent keeps its default.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from pathlib import Path
from typing import Final

LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0", ""})


def directory() -> Path:
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        return Path(runtime) / "turnkeeper"
    return Path(tempfile.gettempdir()) / f"turnkeeper-{os.getuid()}"


def _port(address: str) -> int | None:
    """The port of a HOST:PORT on this machine (a loopback host), else None."""
    address = address.removeprefix("dns:///").removeprefix("ipv4:").removeprefix("ipv6:")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or host.lower() not in LOOPBACK:
        return None
    return int(port)


def _file(port: int) -> Path:
    return directory() / f"service-{port}.json"


def _ours(path: Path) -> bool:
    """Owned by this user and writable by nobody else."""
    try:
        info = path.stat()
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def publish(address: str, nats_url: str) -> Path | None:
    """Say where this service's NATS is, for agents on this machine; the file written,
    or None (an address that is not TCP, a directory that cannot be used)."""
    port = _port(address)
    if port is None or not port:
        return None
    folder = directory()
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        if not _ours(folder):
            return None
        path = _file(port)
        record = {"address": address, "nats_url": nats_url, "pid": os.getpid()}
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        partial.write_text(json.dumps(record), encoding="utf-8")
        partial.chmod(0o600)
        partial.replace(path)
    except OSError:
        return None
    return path


def withdraw(path: Path | None) -> None:
    """Remove a file this process published (not one a later service wrote since)."""
    if path is None:
        return
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()


def nats_url_for(target: str) -> str | None:
    """The NATS URL the service at `target` published, when it runs on this machine
    and is alive; None otherwise."""
    port = _port(target)
    if port is None:
        return None
    path = _file(port)
    if not _ours(path.parent) or not _ours(path):
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        pid, url = int(record["pid"]), record["nats_url"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return url if isinstance(url, str) and url else None
