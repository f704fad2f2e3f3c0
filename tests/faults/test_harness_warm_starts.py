"""The harness's warm starts (tests/support/forkserver.py, decision 793): a Python
agent forked from the worker's fork server is the process a cold start gives, as a
test sees it (argv, environment, working directory, its own process group, piped
stdin, stdout and stderr, its exit status), and is killed like one. A start whose
environment asks for another interpreter is started cold."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.support.agents import PATIENCE, Agent
from tests.support.forkserver import COLD, ForkedProcess
from tests.support.procs import FORK_SERVER, kill_group, spawn_python

PROBE = """\
import json, os, sys
line = sys.stdin.readline().strip()
print(json.dumps({
    "argv": sys.argv,
    "path0": sys.path[0],
    "cwd": os.getcwd(),
    "leader": os.getpgid(0) == os.getpid(),
    "variable": os.environ.get("WARM_PROBE"),
    "cold": os.environ.get("TURNKEEPER_TEST_COLD_STARTS"),
    "stdin": line,
}))
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def _env(cold: bool) -> dict[str, str]:
    env = {**os.environ, "WARM_PROBE": "seen", "PYTHONUNBUFFERED": "1"}
    env.pop(COLD, None)
    if cold:
        env[COLD] = "1"
    return env


@pytest.mark.parametrize("cold", [False, True], ids=["warm", "cold"])
async def test_a_warm_start_is_the_process_a_cold_one_is(cold: bool, tmp_path: Path) -> None:
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    child = await spawn_python(str(script), "3", env=_env(cold), cwd=tmp_path)
    assert isinstance(child.proc, ForkedProcess) is not cold
    agent = Agent(child, "probe")
    assert child.proc.stdin is not None
    child.proc.stdin.write(b"hello\n")
    await child.proc.stdin.drain()
    assert await agent.wait_exit(PATIENCE) == 3
    report = json.loads(next(line for line in agent.lines if line.startswith("{")))
    assert report == {
        "argv": [str(script), "3"],
        "path0": str(tmp_path),
        "cwd": str(tmp_path),
        "leader": True,
        "variable": "seen",
        "cold": "1" if cold else None,
        "stdin": "hello",
    }
    assert "to stderr" in agent.lines


async def test_a_module_runs_as_python_m_runs_it(tmp_path: Path) -> None:
    (tmp_path / "warm_probe_module.py").write_text(PROBE)
    child = await spawn_python(
        "-m", "warm_probe_module", "0", env=_env(False), cwd=tmp_path, stdin=subprocess.DEVNULL
    )
    agent = Agent(child, "module")
    assert await agent.wait_exit(PATIENCE) == 0
    report = json.loads(next(line for line in agent.lines if line.startswith("{")))
    assert report["argv"] == [str(tmp_path / "warm_probe_module.py"), "0"]
    assert report["path0"] == str(tmp_path) and report["stdin"] == ""


async def test_a_warm_child_killed_as_it_starts_dies_of_sigkill() -> None:
    """Its process group exists by the time the test has its pid: a group kill at
    once reaches it (the fork server makes the group as well as the child)."""
    for i in range(20):
        child = await spawn_python("-c", "import signal; signal.pause()", env=_env(False))
        assert isinstance(child.proc, ForkedProcess)
        kill_group(child.proc.pid)
        assert await Agent(child, f"killed-{i}").wait_exit(PATIENCE) == -signal.SIGKILL


async def test_another_interpreters_environment_is_started_cold(tmp_path: Path) -> None:
    env = {**_env(False), "PYTHONOPTIMIZE": "1"}
    code = "import sys; print('flag', sys.flags.optimize)"
    child = await spawn_python("-c", code, env=env, cwd=tmp_path)
    assert not isinstance(child.proc, ForkedProcess)
    agent = Agent(child, "optimize")
    assert await agent.wait_exit(PATIENCE) == 0
    assert "flag 1" in agent.lines


# A program that says where its modules came from and what its path is.
PATH_PROBE = """\
import json, sys
import only_here, httpx
print(json.dumps({
    "only_here": only_here.__file__,
    "httpx": httpx.__file__,
    "path": sys.path[1:3],
    "warm": "langgraph.graph" in sys.modules,
}))
"""


@pytest.mark.parametrize("shadowing", [False, True], ids=["its-own", "shadowing"])
async def test_a_pythonpath_is_on_the_path_where_a_cold_interpreter_puts_it(
    tmp_path: Path, shadowing: bool
) -> None:
    """Forked, with its directories after the program's own and before the standard
    library's, relative ones made absolute and repeats dropped, as `python` does;
    one that holds a module the fork server imported (httpx) from elsewhere runs
    cold, and imports that one."""
    first, second = tmp_path / "first", tmp_path / "second"
    for directory in (first, second):
        directory.mkdir()
    (first / "only_here.py").write_text("")
    if shadowing:
        (second / "httpx.py").write_text("")
    script = tmp_path / "probe.py"
    script.write_text(PATH_PROBE)
    variable = os.pathsep.join(["first", str(second), str(first)])
    env = {**_env(False), "PYTHONPATH": variable}
    child = await spawn_python(str(script), env=env, cwd=tmp_path)
    assert isinstance(child.proc, ForkedProcess)  # forked; the shadowing one then execs
    agent = Agent(child, "pythonpath")
    assert await agent.wait_exit(PATIENCE) == 0
    report = json.loads(next(line for line in agent.lines if line.startswith("{")))
    assert report["only_here"] == str(first / "only_here.py")
    assert report["path"] == [str(first), str(second)]
    assert (report["httpx"] == str(second / "httpx.py")) is shadowing
    assert report["warm"] is not shadowing  # the fork server's imports, or a cold start's


async def test_code_runs_as_python_c_runs_it(tmp_path: Path) -> None:
    code = "import os, sys; print(sys.argv, repr(sys.path[0]), __name__); sys.exit(4)"
    child = await spawn_python("-c", code, "x", env=_env(False), cwd=tmp_path)
    assert isinstance(child.proc, ForkedProcess)
    agent = Agent(child, "code")
    assert await agent.wait_exit(PATIENCE) == 4
    assert "['-c', 'x'] '' __main__" in agent.lines


def test_a_blocking_start_is_a_popen_with_its_stderr_in_its_stdout() -> None:
    """ServiceProcess's warm start: stdout and stderr one text pipe, `poll`, `wait`
    (its timeout as Popen's), and a kill's status."""
    code = "import sys, threading; print('out'); print('err', file=sys.stderr); "
    code += "threading.Event().wait()"  # until killed
    proc = FORK_SERVER.spawn_blocking("-c", code, env=_env(False))
    assert proc.stdout.readline() == "out\n" and proc.stdout.readline() == "err\n"
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(timeout=0)
    proc.kill()
    assert proc.wait() == -signal.SIGKILL and proc.poll() == -signal.SIGKILL
    finished = FORK_SERVER.spawn_blocking("-c", "raise SystemExit(6)", env=_env(False))
    assert finished.wait() == 6 and finished.stdout.read() == ""
