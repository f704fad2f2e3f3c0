"""The Node.js package as a user meets it: the Node versions the README names are the
ones package.json's engines accept; a program that only asks a turn's status installs
without LangGraph.js (its pieces are behind the `./agent` entry point, LangGraph an
optional peer) and reads states as names; `turnkeeper-follow | head` ends quietly."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.node import NODE, NPM, REPO, run_command
from tests.support.turns import value

README = REPO / "clients" / "node" / "README.md"
PACKAGE_JSON = REPO / "clients" / "node" / "package.json"


def test_the_node_versions_the_readme_names_are_the_ones_engines_accepts() -> None:
    engines = json.loads(PACKAGE_JSON.read_text())["engines"]["node"]
    named = re.search(r"Node\.js (\d+) or (\d+)", README.read_text())
    assert named, "the README names the Node.js versions the package runs on"
    assert engines == f"^{named[1]}.0.0 || ^{named[2]}.0.0"


STATUS_PROGRAM = r"""
import { TurnkeeperClient } from "@turnkeeper/client";

const client = new TurnkeeperClient(process.env.TURNKEEPER_ADDRESS);
for (const turnId of ["status-turn", "no-such-turn"]) {
  console.log(JSON.stringify(await client.status(turnId)));
}
client.close();
"""


async def test_a_status_only_program_installs_without_langgraph_and_reads_state_names(
    node_package: Path, service: TurnkeeperServer, client: AsyncTurnkeeperClient, tmp_path: Path
) -> None:
    assert NPM is not None and NODE is not None
    await client.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id="status-turn",
            thread_id="th",
            agent="a",
            input=value({}),
            replica="r",
            incarnation="i",
        )
    )
    code, stdout, stderr = await run_command(
        [NPM, "pack", "--pack-destination", str(tmp_path)], node_package
    )
    assert code == 0, stdout + stderr
    tarball = tmp_path / stdout.strip().splitlines()[-1]
    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(
        json.dumps({"name": "app", "private": True, "type": "module"})
    )
    code, stdout, stderr = await run_command(
        [NPM, "install", "--prefer-offline", "--no-audit", "--no-fund", str(tarball)], app
    )
    assert code == 0, stdout + stderr
    assert not (app / "node_modules" / "@langchain").exists()
    (app / "status.mjs").write_text(STATUS_PROGRAM)
    code, stdout, stderr = await run_command(
        [NODE, "status.mjs"], app, env={"TURNKEEPER_ADDRESS": service.address}, timeout=60
    )
    assert code == 0, stdout + stderr
    running, unknown = (json.loads(line) for line in stdout.splitlines())
    assert running["state"] == "RUNNING" and running["turnId"] == "status-turn"
    assert unknown["state"] == "UNKNOWN"


async def test_follow_piped_into_head_ends_quietly(
    node_package: Path, service: TurnkeeperServer, client: AsyncTurnkeeperClient
) -> None:
    assert NODE is not None
    await client.start_turn(
        turns_pb2.StartTurnRequest(
            turn_id="long-turn",
            thread_id="th",
            agent="a",
            input=value({}),
            replica="r",
            incarnation="i",
        )
    )
    # More than a pipe holds (64 KiB), so the follower is still writing when head leaves.
    big = json.dumps({"text": "x" * 1000})
    await client.append_events(
        turns_pb2.AppendEventsRequest(
            turn_id="long-turn",
            attempt=0,
            events=[
                turns_pb2.EventInput(seq=i, type="token", data_json=big) for i in range(1, 201)
            ],
        )
    )
    await client.finish_turn(
        turns_pb2.FinishTurnRequest(turn_id="long-turn", attempt=0, outcome=turns_pb2.OUTCOME_DONE)
    )
    follow = node_package / "dist" / "cli" / "follow.js"
    process = await asyncio.create_subprocess_shell(
        f"'{NODE}' '{follow}' --address {service.address} long-turn | head -n 1; "
        'echo "exit=${PIPESTATUS[0]}" >&2',
        executable="/bin/bash",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert json.loads(stdout.decode())["frame"] == "status"
    assert stderr.decode() == "exit=0\n"
