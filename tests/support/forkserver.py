"""Python agents and services started warm: a fork server per test worker that
imported LangGraph once, and forks a real process per start (decision 793).

Every agent process of the suite imports LangGraph, langchain-core and pydantic
before it does anything, about a CPU-second each (a service about half of that);
the suite starts some 250 agents and 110 services, on a machine whose two cores the three workers already keep busy (decision
792). A child forked from an interpreter that has those imports done runs the same
program (`python -m module`, `python -c code` or `python script.py`, its argv, environment and working
directory, its own process group, stdin/stdout/stderr the test's pipes) without
paying them again. It is a real process all the same: its own pid, killed by
SIGKILL, its exit status the test's to read.

What the server imports is third-party code only, and no module that starts a
thread or reads the environment at import for anything a test sets: turnkeeper's
own modules, and grpc (whose core reads GRPC_* variables when it starts), are
imported by each child, as a cold process would. A start whose environment asks
for another interpreter (any PYTHON* variable but PYTHONUNBUFFERED and PYTHONPATH
set otherwise than the server's) is not forked: `procs.spawn_python` and
`ServiceProcess` start it cold. So are the processes of the tests that are about
starting one as users do (the guides, `turnkeeper dev`, the import checks), and
every start when TURNKEEPER_TEST_COLD_STARTS=1. A PYTHONPATH goes on the child's path
where a cold interpreter puts it; one that holds a module the server imported from
elsewhere turns the child into a cold interpreter (`os.execv`, the same process)
before it runs anything (decision 798).

The protocol, one UNIX connection per child: the test sends a JSON request and its
three pipe ends (SCM_RIGHTS); the server answers the child's pid, then, when it has
reaped the child, its exit status as asyncio gives it (-N for a signal N); a
connection closed with no status means the server itself ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import io
import json
import os
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

REPO = Path(__file__).resolve().parents[2]
# What every agent of the suite imports first, and nothing of ours (see above).
PRELOAD = (
    "langgraph.graph",
    "langgraph.types",
    "langgraph.func",
    "langgraph.checkpoint.base",
    "langgraph.prebuilt",
    "langchain_core.messages",
    "langchain_core.runnables",
    "langchain_core.language_models",
    "langchain_core.tools",
    "langgraph_sdk",
    "nats.aio.client",
    "httpx",
)
COLD = "TURNKEEPER_TEST_COLD_STARTS"
# Variables a Python interpreter reads only as it starts.
_STARTUP_VARIABLES_ALLOWED = {"PYTHONUNBUFFERED"}
_MAX_FD = 4096


# ---- the server (`python -m tests.support.forkserver SOCKET`) ------------------------


def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    data = b""
    fds: list[int] = []
    while not data.endswith(b"\n"):
        chunk, more, _, _ = socket.recv_fds(conn, 1 << 16, 3)
        if not chunk:
            raise ConnectionError("request cut short")
        data += chunk
        fds += more
    return json.loads(data), fds


def _serve(path: str) -> tuple[dict[str, Any], list[int]]:
    """Forks a child per request; returns only in a child, with its request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ)  # the worker's end
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.fileobj is listener:
                conn, _ = listener.accept()
                try:
                    request, fds = _receive(conn)
                except (ConnectionError, ValueError):
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    listener.close()
                    for sock in (conn, *children.values()):
                        sock.close()
                    os.close(wake_r)
                    os.close(wake_w)
                    return request, fds
                # The child does this too: whichever runs first, the group exists
                # before the test has the pid (so `kill_group(pid)` reaches it).
                with contextlib.suppress(OSError):
                    os.setpgid(pid, pid)
                for fd in fds:
                    os.close(fd)
                children[pid] = conn
                with contextlib.suppress(OSError):
                    conn.sendall(f"{pid}\n".encode())
            elif key.fileobj == wake_r:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap(children)
            elif not os.read(sys.stdin.fileno(), 4096):
                raise SystemExit(0)  # the worker is gone


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """In the child: the process the request asked for, up to running its code."""
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    os.closerange(3, _MAX_FD)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)))
    for fd, name in ((1, "stdout"), (2, "stderr")):
        raw = io.FileIO(fd, "w", closefd=False)
        stream = io.TextIOWrapper(
            raw if unbuffered else io.BufferedWriter(raw),
            write_through=unbuffered,
            line_buffering=name == "stderr" and not unbuffered,
            errors="backslashreplace" if name == "stderr" else "strict",
        )
        setattr(sys, name, stream)


def _search_path(variable: str) -> list[str] | None:
    """The directories a cold interpreter puts on sys.path from PYTHONPATH (after the
    program's own, before the standard library's: each made absolute, an empty one
    the working directory), or None when one of them holds a top-level module this
    interpreter already imported from elsewhere: a cold interpreter would import that
    one instead."""
    entries: list[str] = []
    for entry in variable.split(os.pathsep):
        directory = os.path.abspath(entry)
        if directory not in entries:
            entries.append(directory)
    for directory in entries:
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            continue  # on the path all the same, and holds nothing
        except OSError:
            return None  # unreadable, or a zip archive: not worth reading here
        for name in names:
            top = name.split(".", 1)[0]
            module = sys.modules.get(top)
            if module is None:
                continue
            where = getattr(module, "__file__", None) or next(
                iter(getattr(module, "__path__", None) or ()), None
            )
            if where is None:
                continue  # built in: found before any directory is looked at
            if not os.path.abspath(where).startswith(os.path.join(directory, "")):
                return None
    return entries


def main() -> None:
    for module in PRELOAD:
        importlib.import_module(module)
    if threading.active_count() != 1:
        raise SystemExit(f"forkserver: a preload started a thread: {threading.enumerate()}")
    request, fds = _serve(sys.argv[1])
    _become(request, fds)
    args: list[str] = request["args"]
    variable = os.environ.get("PYTHONPATH")
    if variable:
        entries = _search_path(variable)
        if entries is None:
            # What it asks for shadows what this interpreter has imported: the same
            # process (its pid, group and pipes) becomes a cold interpreter.
            os.execv(sys.executable, [sys.executable, *args])
        rest = [entry for entry in sys.path[1:] if entry not in entries]
        sys.path[1:] = [*entries, *rest]
    if args[0] == "-m":
        sys.argv = [args[1], *args[2:]]
        sys.path[0] = os.getcwd()
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.argv = ["-c", *args[2:]]
        sys.path[0] = ""
        namespace = types.ModuleType("__main__")
        sys.modules["__main__"] = namespace
        exec(compile(args[1], "<string>", "exec"), namespace.__dict__)
    else:
        sys.argv = list(args)
        sys.path[0] = str(Path(args[0]).resolve().parent)
        runpy.run_path(args[0], run_name="__main__")


# ---- the test's side ---------------------------------------------------------------


class _Signalled:
    """Signals to a forked child by its pid, while it has not been seen to exit
    (never to a pid the server reaped and the system may give again)."""

    pid: int

    def _running(self) -> bool:
        raise NotImplementedError

    def send_signal(self, sig: int) -> None:
        if self._running():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkedProcess(_Signalled):
    """A forked child, as much of asyncio.subprocess.Process as the tests use."""

    def __init__(
        self,
        pid: int,
        exited: asyncio.Future[int],  # the task that reads its status
        stdin: asyncio.StreamWriter | None,
        stdout: asyncio.StreamReader | None,
        stderr: asyncio.StreamReader | None,
    ) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = stdin
        self.stdout = stdout
        self.stderr = stderr
        self.exited = exited  # its exit status, once the server reaped it
        exited.add_done_callback(self._set_returncode)

    def _set_returncode(self, exited: asyncio.Future[int]) -> None:
        if not exited.cancelled():
            self.returncode = exited.result()

    async def wait(self) -> int:
        return await asyncio.shield(self.exited)

    def _running(self) -> bool:
        return self.returncode is None


def _request(
    path: str,
    args: tuple[str, ...],
    env: dict[str, str],
    cwd: str | os.PathLike[str] | None,
    fds: list[int],
) -> socket.socket:
    """The start's connection, its request sent with the child's ends of its pipes
    (closed here: the child has its copies)."""
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
        request = {"args": list(args), "env": env, "cwd": str(cwd or os.getcwd())}
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], fds)
    except BaseException:
        conn.close()
        raise
    finally:
        for fd in fds:
            os.close(fd)
    return conn


class ForkedPopen(_Signalled):
    """A forked child, as much of subprocess.Popen as ServiceProcess uses: its
    stdout (stderr merged in, as text), and its exit status read from the start's
    connection."""

    def __init__(self, conn: socket.socket, stdout: io.TextIOWrapper) -> None:
        self._conn = conn
        self._received = b""
        self._lock = threading.Lock()
        self.stdout = stdout
        self.returncode: int | None = None
        self.pid = int(self._line(None))

    def _line(self, timeout: float | None) -> bytes:
        """The next line from the server (raises TimeoutError, or socket's on 0)."""
        self._conn.settimeout(timeout)
        while b"\n" not in self._received:
            chunk = self._conn.recv(64)
            if not chunk:
                raise RuntimeError("the fork server ended before its child")
            self._received += chunk
        line, self._received = self._received.split(b"\n", 1)
        return line

    def _status(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is None:
                try:
                    self.returncode = int(self._line(timeout))
                except (TimeoutError, BlockingIOError):
                    return None
                self._conn.close()
            return self.returncode

    def poll(self) -> int | None:
        return self._status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0)
        return code

    def _running(self) -> bool:
        return self.poll() is None


class ForkServer:
    """The worker's fork server, started by its first `spawn`, ended with the worker
    (it reads the end of its stdin)."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._dir = ""
        self._path = ""
        self._env: dict[str, str] = {}
        self._lock = threading.Lock()

    def takes(self, env: dict[str, str]) -> bool:
        """Whether a child with `env` can be forked from this server's interpreter."""
        if os.environ.get(COLD) == "1" or env.get(COLD) == "1":
            return False
        server = self._env or dict(os.environ)
        names = {n for n in (*env, *server) if n.startswith("PYTHON")}
        allowed = _STARTUP_VARIABLES_ALLOWED
        if "PYTHONPATH" not in server:
            allowed = allowed | {"PYTHONPATH"}  # the child puts it on its path (`main`)
        return all(env.get(n) == server.get(n) for n in names - allowed)

    def _started(self) -> str:
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._dir = tempfile.mkdtemp(prefix="turnkeeper-forkserver-")
                self._path = os.path.join(self._dir, "socket")
                self._env = dict(os.environ)
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "tests.support.forkserver", self._path],
                    cwd=REPO,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=self._env,
                )
                assert self._proc.stdout is not None
                line = self._proc.stdout.readline()
                if line != b"ready\n":
                    raise RuntimeError(f"the fork server did not start: {line!r}")
            return self._path

    def stop(self) -> None:
        with self._lock:
            if self._proc is not None:
                assert self._proc.stdin is not None
                self._proc.stdin.close()
                self._proc.wait()
                self._proc = None
            if self._dir:
                with contextlib.suppress(OSError):
                    os.unlink(self._path)
                    os.rmdir(self._dir)

    def spawn_blocking(
        self, *args: str, env: dict[str, str], cwd: str | os.PathLike[str] | None = None
    ) -> ForkedPopen:
        """`python <args>` forked, as `subprocess.Popen(args, stdin=DEVNULL,
        stdout=PIPE, stderr=STDOUT, text=True)` starts it cold."""
        path = self._started()
        r, w = os.pipe()
        theirs = [os.open(os.devnull, os.O_RDONLY), w, os.dup(w)]
        conn = _request(path, args, env, cwd, theirs)
        return ForkedPopen(conn, open(r, encoding=None))

    async def spawn(
        self,
        *args: str,
        env: dict[str, str],
        cwd: str | os.PathLike[str] | None = None,
        stdin: int = subprocess.PIPE,
        stderr: int | IO[Any] = subprocess.PIPE,
    ) -> tuple[ForkedProcess, Callable[[], None]]:
        """`python <args>` forked: the process, and what closes the test's pipe ends.
        `stdin` a pipe or DEVNULL; stdout a pipe; `stderr` a pipe or a file."""
        loop = asyncio.get_running_loop()
        path = await asyncio.to_thread(self._started)
        # Each pair: the end the child gets, and ours (-1: none).
        if stdin == subprocess.DEVNULL:
            stdin_r, stdin_w = os.open(os.devnull, os.O_RDONLY), -1
        else:
            stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        if stderr == subprocess.PIPE:
            stderr_r, stderr_w = os.pipe()
        else:
            assert not isinstance(stderr, int)
            stderr_r, stderr_w = -1, os.dup(stderr.fileno())
        conn = _request(path, args, env, cwd, [stdin_r, stdout_w, stderr_w])
        conn.setblocking(False)
        reader, writer = await asyncio.open_unix_connection(sock=conn)
        pid = int(await reader.readline())

        async def status() -> int:
            try:
                line = await reader.readline()
            finally:
                writer.close()
            if not line:
                raise RuntimeError("the fork server ended before its child")
            return int(line)

        exited = loop.create_task(status())  # held by the process it reports on
        transports: list[asyncio.BaseTransport] = []

        async def read(fd: int) -> asyncio.StreamReader:
            stream = asyncio.StreamReader(limit=2**16, loop=loop)
            transport, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(stream, loop=loop), os.fdopen(fd, "rb", 0)
            )
            transports.append(transport)
            return stream

        stdin_writer: asyncio.StreamWriter | None = None
        if stdin_w >= 0:
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop), os.fdopen(stdin_w, "wb", 0)
            )
            stdin_writer = asyncio.StreamWriter(transport, protocol, None, loop)
            transports.append(transport)
        stdout_reader = await read(stdout_r)
        stderr_reader = await read(stderr_r) if stderr_r >= 0 else None

        def close_pipes() -> None:
            for transport in transports:
                transport.close()

        process = ForkedProcess(pid, exited, stdin_writer, stdout_reader, stderr_reader)
        return process, close_pipes


if __name__ == "__main__":
    main()
