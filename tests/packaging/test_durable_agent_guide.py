"""The "make your agent durable" guides, run as written (decision 207): the Python
bridge's (docs/guides/durable-agent.md), the TypeScript turn runner's
(docs/guides/durable-agent-typescript.md) and the `langgraph.json` host's, driven by
LangGraph's own client (docs/guides/langgraph-json.md). Each page's files are written
out, its commands run, the agent SIGKILLed while `write` runs (the page's `kill -9`)
and started again, and the turn then done, `research`'s step shown once: after the
reset to a follower of the journal, and once in all to a LangGraph client, which is
never shown a step that may run again.

As the README test, the pages' fixed ports (4222, 50051, 8080, 2024) become free ones, in
the commands and the files, and the environment gives the service's address and data
directory. The Python install line is the README test's own (an editable install of
the client and the server), so it is checked, not run: this test runs in the suite's
venv. The TypeScript page's npm lines run as written, in a copy of clients/node, from
npm's cache where it has the packages (.ci/run's `npm ci` filled it).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packaging.test_readme_commands import (
    Background,
    bash,
    block,
    blocks,
    data_dir,
    free_port,
)
from tests.support.node import NPM

ROOT = Path(__file__).resolve().parents[2]
# What an agent of every page prints once it takes tasks.
SERVING = r"serving vystak\.default\.agents\.writer\.tasks"
INSTALL_SERVICE = (
    "python3.11 -m venv .venv && . .venv/bin/activate && pip install -e {client} -e ./server"
)


@dataclass(frozen=True)
class Guide:
    page: str
    install: str
    language: str  # the fence of the page's files: ```python or ```ts
    files: tuple[str, ...]
    start_all: str
    start_turn: str
    started: tuple[str, ...]  # what the start command's answer contains
    follow: str
    research_done: str  # what the follower prints when research's step is done
    restart: str
    show: str
    ended: str = r"turn\.done"  # what the follower prints last
    json_file: str | None = None  # the name of the page's one ```json block
    rewinds_shown: bool = True  # the follower is shown the reset

    def commands(self) -> list[str]:
        return [self.install, self.start_all, self.start_turn, self.follow, self.restart, self.show]

    def sources(self) -> dict[str, str]:
        """Each file of the page by the name its first line gives it, as written."""
        fence = re.compile(
            rf"^```{self.language}\n((?://|#) ([\w.]+):.*?\n.*?)^```\n", re.MULTILINE | re.DOTALL
        )
        text = (ROOT / self.page).read_text()
        found = {m.group(2): m.group(1) for m in fence.finditer(text)}
        if self.json_file is not None:
            json_block = re.search(r"^```json\n(.*?)^```\n", text, re.MULTILINE | re.DOTALL)
            assert json_block, f"{self.page} has no json block"
            found[self.json_file] = json_block.group(1)
        return found


PYTHON = Guide(
    page="docs/guides/durable-agent.md",
    install=INSTALL_SERVICE.format(client="'./clients/python[agent]'"),
    language="python",
    files=("agent.py", "graph.py", "start.py"),
    start_all="nats-server -p 4222 &",
    start_turn="python start.py",
    started=("'turn_id': 'turn-1'", "'status': 'in_progress'"),
    follow="turnkeeper turns watch turn-1",
    research_done=r"\bstep\b.*research",
    restart="NATS_URL=nats://127.0.0.1:4222 python agent.py &",
    show="turnkeeper turns show turn-1",
)
TYPESCRIPT = Guide(
    page="docs/guides/durable-agent-typescript.md",
    install=INSTALL_SERVICE.format(client="./clients/python"),
    language="ts",
    files=("agent.ts", "graph.ts", "start.ts", "status.ts"),
    start_all="nats-server -p 4222 &",
    start_turn="node --import tsx start.ts",
    started=('"turn_id":"turn-1"', '"status":"in_progress"'),
    follow="npx turnkeeper-follow turn-1",
    research_done=r"\bstep\b.*research",
    restart="NATS_URL=nats://127.0.0.1:4222 node --import tsx agent.ts &",
    show="node --import tsx status.ts",
)
LANGGRAPH_JSON = Guide(
    page="docs/guides/langgraph-json.md",
    install=INSTALL_SERVICE.format(client="'./clients/python[agent]'"),
    language="python",
    files=("follow.py", "graph.py", "langgraph.json", "run.py", "state.py"),
    json_file="langgraph.json",
    start_all="nats-server -p 4222 &",
    start_turn="python run.py > run-id",
    started=(),
    follow="python follow.py",
    research_done=r"^updates \{'research'",
    ended=r"^updates \{'write'",
    restart="NATS_URL=nats://127.0.0.1:4222 turnkeeper agent langgraph.json &",
    show="python state.py",
    rewinds_shown=False,
)
GUIDES = [
    pytest.param(PYTHON, id="python"),
    pytest.param(TYPESCRIPT, id="typescript"),
    pytest.param(LANGGRAPH_JSON, id="langgraph-json"),
]


@pytest.mark.parametrize("guide", GUIDES)
def test_the_page_has_the_blocks_and_files_this_test_runs(guide: Guide) -> None:
    assert [b.first_line for b in blocks(guide.page)] == guide.commands()
    assert sorted(guide.sources()) == list(guide.files)


def words(text: str) -> list[list[str]]:
    return [line.split() for line in text.splitlines() if line.strip()]


def npm_project(guide: Guide, tmp_path: Path, env: dict[str, str]) -> Path:
    """The TypeScript page's install lines after the service's, run as written in a
    copy of the package; the agent's project they make."""
    if NPM is None:
        pytest.skip(reason="npm is not on PATH: the TypeScript guide's agent cannot be installed")
    repo = tmp_path / "repo"
    shutil.copytree(
        ROOT / "clients" / "node",
        repo / "clients" / "node",
        ignore=shutil.ignore_patterns("node_modules", "dist", "*.tgz"),
    )
    install = block(guide.page, guide.install).text.split("\n", 1)[1]
    bash(install, repo, {**env, "npm_config_prefer_offline": "true"}, 600)
    return repo / "my-agent"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("guide", GUIDES)
def test_the_guide_starts_follows_crashes_and_resumes_a_turn(guide: Guide, tmp_path: Path) -> None:
    ports = {fixed: str(free_port()) for fixed in ("4222", "50051", "8080", "2024")}

    def ported(text: str) -> str:
        for fixed, free in ports.items():
            text = text.replace(fixed, free)
        return text

    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TURNKEEPER_", "NATS_"))},
        "PYTHONUNBUFFERED": "1",
        "TURNKEEPER_DATA_DIR": str(data_dir(tmp_path)),
        "TURNKEEPER_LISTEN": f"127.0.0.1:{ports['50051']}",
        "TURNKEEPER_ADDRESS": f"127.0.0.1:{ports['50051']}",
        "TURNKEEPER_HTTP_PORT": "-1",
        "TURNKEEPER_HEALTH_LISTEN": f"127.0.0.1:{ports['8080']}",
        "no_proxy": "127.0.0.1,localhost",
        "no_grpc_proxy": "127.0.0.1,localhost",
    }
    if guide is TYPESCRIPT:
        work = npm_project(guide, tmp_path, env)
    else:
        work = tmp_path / "my-agent"
        work.mkdir()
    for name, source in guide.sources().items():
        (work / name).write_text(ported(source))
    nats_line, serve_line, agent_line = ported(block(guide.page, guide.start_all).text).splitlines()
    started: list[Background] = []

    def background(line: str) -> Background:
        started.append(Background.start(line.strip().removesuffix("&").strip(), work, env))
        return started[-1]

    try:
        background(nats_line).wait_for("Server is ready", 30)
        background(serve_line).wait_for(r"^turnkeeper listening on ", 60)
        agent = background(agent_line)
        agent.wait_for(SERVING, 60)

        answer = bash(block(guide.page, guide.start_turn).text, work, env, 60)
        for part in guide.started:
            assert part in answer, answer
        follow = background(block(guide.page, guide.follow).text)
        # research has finished and written its step event: write runs now.
        follow.wait_for(guide.research_done, 60)
        os.killpg(agent.process.pid, signal.SIGKILL)  # the page's `kill -9`
        agent.process.wait()
        restarted = background(ported(block(guide.page, guide.restart).text))
        follow.wait_for(guide.ended, 60)
        assert follow.process.wait(30) == 0
        shown = "\n".join(follow.lines)
        if guide.rewinds_shown:
            assert "reset" in shown.lower()
            # research's step event once after the reset: it was not run again.
            shown = shown.lower().split("reset", 1)[1]
        assert len(re.findall(guide.research_done, shown, re.MULTILINE)) == 1

        # The page's reader runs `show` against the agent they started again: a
        # LangGraph state read is the agent's to answer. The stream can end without
        # it (on a loaded machine the kill may land after `write` finished), so its
        # end alone says nothing of the new agent (a run failed on "no replica of
        # agent 'writer' is listening").
        restarted.wait_for(SERVING, 60)
        record = words(bash(block(guide.page, guide.show).text, work, env, 60))
        expected = block(guide.page, guide.show).output
        assert expected is not None
        for line in words(expected):
            assert line in record, f"{line} not in\n{record}"
    finally:
        for process in reversed(started):
            process.stop()
