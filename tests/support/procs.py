"""Services and agents as real subprocesses, for tests about crashes."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tests.support.forkserver import ForkedPopen, ForkedProcess, ForkServer

_LISTENING = re.compile(r"turnkeeper listening on (\S+)")
REPO = Path(__file__).resolve().parents[2]


def signal_child(proc: asyncio.subprocess.Process | ForkedProcess, sig: int) -> None:
    """Send ``sig`` to an asyncio child whose exit the loop has not seen, reaping nothing.

    Not ``proc.send_signal``: on Python 3.11 that goes through
    ``Popen.send_signal``, which first polls the child with ``waitpid(WNOHANG)``. A
    child that died a moment before (an agent whose poison node SIGKILLed it) is then
    reaped by that poll instead of by asyncio's child watcher, which finds it gone and
    reports status 255 in place of the real one. ``os.kill`` never waits. If the
    watcher reaped the child but the loop has not yet run its callback, the pid is
    free, not reused (pids are handed out in a cycle), and the kill finds no process.
    """
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)


class _ExitProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's protocol of a Process, plus the child's exit as asyncio's child watcher
    saw it: waitpid on its pid, whatever became of its pipes."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=2**16, loop=loop)
        self.exited: asyncio.Future[int] = loop.create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self._process = transport
        super().connection_made(transport)

    def process_exited(self) -> None:
        returncode = self._process.get_returncode()
        assert returncode is not None
        if not self.exited.done():
            self.exited.set_result(returncode)
        super().process_exited()


@dataclass
class Child:
    """An asyncio child process, and its exit by its pid (`exited`: the exit status).

    Not ``proc.wait()``: on Python 3.11 that returns only once the child has exited
    *and* every pipe asyncio holds to it has closed (base_subprocess.py:
    ``_try_finish`` wakes the waiters from ``_call_connection_lost``). A pipe still
    open after the exit (another process holding its other end, or a reader that
    stopped reading, so the transport is paused and never sees the end of file)
    keeps ``wait()`` waiting for ever, though the child has long been reaped.
    """

    proc: asyncio.subprocess.Process | ForkedProcess
    exited: asyncio.Future[int]
    # Closes asyncio's ends of its pipes (their readers see the end of file).
    close_pipes: Callable[[], None]


async def spawn_child(program: str, *args: str, **kwargs: object) -> Child:
    """Start `program` with asyncio: stdin, stdout and stderr pipes unless given, no
    descriptor of ours but those three (close_fds), in a process group of its own
    (its pid), so that `kill_group` ends whatever it started too."""
    loop = asyncio.get_running_loop()
    options: dict[str, object] = {
        "stdin": asyncio.subprocess.PIPE,
        "stdout": asyncio.subprocess.PIPE,
        "stderr": asyncio.subprocess.PIPE,
        "close_fds": True,
        "process_group": 0,
        **kwargs,
    }
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitProtocol(loop),
        program,
        *args,
        **options,  # type: ignore[arg-type]
    )
    return Child(
        asyncio.subprocess.Process(transport, protocol, loop), protocol.exited, transport.close
    )


FORK_SERVER = ForkServer()
atexit.register(FORK_SERVER.stop)


async def spawn_python(
    *args: str,
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None = None,
    stdin: int = subprocess.PIPE,
    stderr: int | IO[Any] = subprocess.PIPE,
) -> Child:
    """`python <args>` as spawn_child starts it (pipes, a process group of its own),
    forked from the worker's fork server when its environment allows
    (tests/support/forkserver.py, decision 793), else started cold."""
    if not FORK_SERVER.takes(env):
        return await spawn_child(
            sys.executable, *args, env=env, cwd=cwd, stdin=stdin, stderr=stderr
        )
    proc, close_pipes = await FORK_SERVER.spawn(*args, env=env, cwd=cwd, stdin=stdin, stderr=stderr)
    return Child(proc, proc.exited, close_pipes)


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the process group `pid` leads (spawn_child), if any is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def start_listener(module: str, *args: str) -> tuple[asyncio.subprocess.Process, str]:
    """`python -m <module> <args>`: one of this folder's small HTTP servers (the
    receiver of effects, the webhook receiver), which prints ``listening <port>``
    once it serves. The process and its loopback URL; a start that says anything
    else fails here, with what it said."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, *args, cwd=REPO, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = (await proc.stdout.readline()).decode()
    if not line.startswith("listening "):
        signal_child(proc, signal.SIGKILL)
        await proc.wait()
        raise AssertionError(f"{module} said {line!r} at its start, not 'listening <port>'")
    return proc, f"http://127.0.0.1:{int(line.split()[1])}"


async def stop_listener(proc: asyncio.subprocess.Process | None) -> None:
    """SIGKILL a start_listener process (nothing of it needs a clean end)."""
    if proc is not None and proc.returncode is None:
        signal_child(proc, signal.SIGKILL)
        await proc.wait()


@contextlib.asynccontextmanager
async def listener(module: str, *args: str) -> AsyncIterator[str]:
    """start_listener's URL for the block; the process stopped after it."""
    proc, url = await start_listener(module, *args)
    try:
        yield url
    finally:
        await stop_listener(proc)


# The options of a channel to a ServiceProcess started again on its port: its
# connections its own, not shared (as grpc does by default) with the process's other
# channels to that address, one of which may still be in its back-off after the
# killed process refused it. Its first call also says `wait_for_ready=True`.
OWN_CONNECTIONS = [("grpc.use_local_subchannel_pool", 1)]


class ServiceProcess:
    """`python -m turnkeeper_server` on a port the OS picks (or a given one)."""

    def __init__(
        self,
        data_dir: Path,
        *,
        nats_url: str | None = None,
        listen: str = "127.0.0.1:0",
        extra: list[str] | None = None,
        database_url: str | None = None,
        env: dict[str, str] | None = None,
        bundled_nats: bool = False,
        command: tuple[str, ...] = ("-m", "turnkeeper_server"),
    ) -> None:
        self.data_dir = data_dir
        # What follows the interpreter: the service's module, or `turnkeeper serve`.
        self.command = command
        # PostgreSQL instead of the SQLite files in data_dir.
        self.database_url = database_url
        self.env = env or {}
        self.nats_url = nats_url
        self.listen = listen
        self.extra = extra or []
        # Without a URL: the service's own bundled nats-server instead of --no-nats.
        self.bundled_nats = bundled_nats
        # Forked from the worker's fork server (decision 793) when its environment
        # allows, else started cold.
        self.process: subprocess.Popen[str] | ForkedPopen | None = None
        self.address = ""
        self.log: list[str] = []
        # Notified on every line and at the end of the output (the process exited).
        self._changed = threading.Condition()
        self._output_ended = False

    def start(self, timeout: float | None = None) -> str:
        """Start it and return its address, read from its announcement ("turnkeeper
        listening on ..."), the event itself. Fails at once if the process exits first;
        no deadline unless `timeout` is given (the test's timeout bounds it)."""
        args = [
            sys.executable,
            *self.command,
            "--listen",
            self.listen,
            *(
                ["--database-url", self.database_url]
                if self.database_url
                else ["--data-dir", str(self.data_dir)]
            ),
            "--log-level",
            "INFO",
            *self.extra,
        ]
        if self.nats_url:
            args += ["--nats-url", self.nats_url]
        elif not self.bundled_nats:
            args += ["--no-nats"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        if FORK_SERVER.takes(env):
            self.process = FORK_SERVER.spawn_blocking(*args[1:], env=env)
        else:
            self.process = subprocess.Popen(
                args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
        assert self.process.stdout is not None
        found = threading.Event()
        self._output_ended = False
        process = self.process

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                with self._changed:
                    self.log.append(line.rstrip())
                    self._changed.notify_all()
                match = _LISTENING.search(line)
                if match:
                    self.address = match.group(1)
                    found.set()
            with self._changed:
                if self.process is process:
                    self._output_ended = True
                self._changed.notify_all()
            found.set()

        threading.Thread(target=pump, daemon=True).start()
        if not found.wait(timeout) or not self.address:
            self.kill()
            raise RuntimeError("service did not start:\n" + "\n".join(self.log))
        # Keep the same port across restarts.
        self.listen = self.address
        return self.address

    def wait_line(self, pattern: re.Pattern[str]) -> re.Match[str]:
        """The first line of its output (all its runs, as `log`) that `pattern` finds:
        the line is the event. Blocking (async tests call it in a thread); fails at
        once when the output ends, i.e. the process exited; no deadline of its own."""
        seen = 0
        with self._changed:
            while True:
                for line in self.log[seen:]:
                    match = pattern.search(line)
                    if match:
                        return match
                seen = len(self.log)
                if self._output_ended:
                    raise AssertionError(
                        f"the service exited before a line {pattern.pattern!r}:\n"
                        + "\n".join(self.log)
                    )
                self._changed.wait()

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def terminate(self, timeout: float = 15.0) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout)
