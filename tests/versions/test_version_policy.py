"""Version policies in the service (docs/versions.md), on both backends: a replica
takes a turn (ClaimTurn, its startup Redrive) only when the agent's policy lets its
graph version continue the turn; a turn no live replica may take waits and says for
which version; an operator moves waiting turns to another version on purpose.

The replicas here are the gRPC calls a bridge makes, with the versions and the
checkpoint stamps real compiled graphs give (tests/support/versioned_graphs.py); the
two-process tests are in test_version_replicas.py."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypeAlias

import grpc
import nats
import pytest
from grpc import aio
from turnkeeper._graph_versions import canonical
from turnkeeper.agent._fingerprint import GraphVersion
from turnkeeper.operator._cli import main
from turnkeeper.v1 import checkpoints_pb2 as cpb
from turnkeeper.v1 import checkpoints_pb2_grpc, operations_pb2, operations_pb2_grpc, turns_pb2_grpc
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.journal.versions import VersionPolicies

from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory, expect_code
from tests.support.turns import value
from tests.support.versioned_graphs import build
from tests.versions.test_fingerprint import parked_stamp

pytestmark = pytest.mark.both_backends

Stub: TypeAlias = "turns_pb2_grpc.TurnServiceAsyncStub"
AGENT = "writer"


def version(variant: str) -> GraphVersion:
    builder, label = build(variant)
    return GraphVersion.of(builder.compile(), label)


def graph(variant: str | None) -> pb.GraphVersion | None:
    if variant is None:
        return None
    v = version(variant)
    return pb.GraphVersion(fingerprint=v.fingerprint, label=v.label, shape_json=canonical(v.shape))


class Replicas:
    """The gRPC side of the service, and what replicas of the agent would call."""

    def __init__(self, channel: aio.Channel) -> None:
        self.turns: Stub = turns_pb2_grpc.TurnServiceStub(channel)
        self.checkpoints = checkpoints_pb2_grpc.CheckpointServiceStub(channel)
        self.operations = operations_pb2_grpc.OperationsServiceStub(channel)

    async def start_parked(self, turn_id: str, variant: str = "v1") -> None:
        """A turn v1 ran to its interrupt in ``ask``: started, taken by a v1 replica's
        startup Redrive, checkpointed with v1's stamp, parked, then resumed: RUNNING
        with no owner, as after a resume whose hand-off nobody took yet."""
        await self.turns.StartTurn(
            pb.StartTurnRequest(
                turn_id=turn_id, thread_id=f"th-{turn_id}", agent=AGENT, input=value({})
            )
        )
        taken = await self.redrive("r-old", "i1", variant)
        assert [t.turn.turn_id for t in taken.turns] == [turn_id]
        turn = taken.turns[0].turn
        stamp = parked_stamp().to_json()
        await self.checkpoints.PutCheckpoint(
            cpb.PutCheckpointRequest(
                thread_id=f"th-{turn_id}",
                checkpoint_id="1ef-0001",
                checkpoint=cpb.TypedValue(type="bytes", data=b"state"),
                metadata_json=json.dumps({"turnkeeper": {"turn_id": turn_id, "graph": stamp}}),
                fence=cpb.TurnFence(turn_id=turn_id, attempt=turn.attempts),
            )
        )
        await self.turns.ParkTurn(
            pb.ParkTurnRequest(turn_id=turn_id, attempt=turn.attempts, interrupt=value("publish?"))
        )
        await self.turns.ResumeDetached(
            pb.ResumeDetachedRequest(turn_id=turn_id, resume=value("yes"))
        )

    async def redrive(self, replica: str, incarnation: str, variant: str | None) -> Any:
        return await self.turns.Redrive(
            pb.RedriveRequest(
                agent=AGENT, replica=replica, incarnation=incarnation, graph=graph(variant)
            )
        )

    async def claim(self, turn_id: str, replica: str, variant: str | None) -> Any:
        status = await self.turns.TurnStatus(pb.TurnStatusRequest(turn_id=turn_id))
        return await self.turns.ClaimTurn(
            pb.ClaimTurnRequest(
                turn_id=turn_id,
                attempt=status.attempts,
                replica=replica,
                incarnation="i1",
                graph=graph(variant),
            )
        )

    async def status(self, turn_id: str) -> pb.TurnStatusResponse:
        return await self.turns.TurnStatus(pb.TurnStatusRequest(turn_id=turn_id))


@pytest.fixture
def policies() -> VersionPolicies:
    return VersionPolicies()


@pytest.fixture
async def versioned_service(
    make_service: ServiceFactory, nats_server: NatsServer, policies: VersionPolicies
) -> TurnkeeperServer:
    return await make_service(nats_url=nats_server.url, version_policies=policies)


@pytest.fixture
async def replicas(versioned_service: TurnkeeperServer) -> AsyncIterator[Replicas]:
    async with aio.insecure_channel(versioned_service.address) as channel:
        yield Replicas(channel)


def policy(name: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("policies", [VersionPolicies(name)])


@policy("pin")
async def test_under_pin_only_the_same_version_claims_and_the_turn_waits_visibly(
    replicas: Replicas,
) -> None:
    await replicas.start_parked("t-pin")
    v1 = version("v1")
    for other in ("label", "new-channel", "removed"):
        message = await expect_code(
            replicas.claim("t-pin", f"r-{other}", other), grpc.StatusCode.FAILED_PRECONDITION
        )
        assert "version policy pin" in message
        assert v1.fingerprint[:12] in message
    status = await replicas.status("t-pin")
    assert status.state == pb.TURN_STATE_RUNNING
    # No live replica serves v1 (none announced on NATS): the turn says what it waits for.
    assert status.waiting_for.fingerprint == v1.fingerprint
    assert status.waiting_for.label == "v1"
    assert "serving graph version" in status.detail and '"v1"' in status.detail
    assert "turnkeeper agents migrate" in status.detail
    claimed = await replicas.claim("t-pin", "r-v1", "v1")
    assert claimed.turn.owner.replica == "r-v1"
    assert claimed.turn.graph.fingerprint == v1.fingerprint
    assert (await replicas.status("t-pin")).detail == ""


@policy("compatible")
async def test_under_compatible_a_version_that_can_continue_the_checkpoint_claims(
    replicas: Replicas,
) -> None:
    await replicas.start_parked("t-compat")
    for variant, needle in (
        ("removed", "node 'ask' is to run next"),
        ("renamed", "node 'ask' is to run next"),
        ("reducer", "channel 'log' changed its reducer"),
    ):
        message = await expect_code(
            replicas.claim("t-compat", f"r-{variant}", variant),
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert "version policy compatible" in message and needle in message
    # A replica from before versions announces none: it cannot be checked.
    await expect_code(
        replicas.claim("t-compat", "r-old-sdk", None), grpc.StatusCode.FAILED_PRECONDITION
    )
    claimed = await replicas.claim("t-compat", "r-notes", "new-channel")
    new = version("new-channel")
    assert claimed.turn.graph.fingerprint == new.fingerprint
    assert claimed.turn.graph.label == "v2-notes"


@policy("compatible")
async def test_a_label_only_change_is_compatible(replicas: Replicas) -> None:
    await replicas.start_parked("t-label")
    claimed = await replicas.claim("t-label", "r-label", "label")
    assert claimed.turn.graph.label == "v1.1"


@policy("latest")
async def test_under_latest_any_replica_claims(replicas: Replicas) -> None:
    await replicas.start_parked("t-latest")
    claimed = await replicas.claim("t-latest", "r-removed", "removed")
    assert claimed.turn.owner.replica == "r-removed"


async def test_the_default_policy_is_compatible_and_per_agent_policies_win(
    make_service: ServiceFactory, nats_server: NatsServer
) -> None:
    assert VersionPolicies().of(AGENT) == "compatible"
    policies = VersionPolicies.parse("latest", [f"{AGENT}=pin"])
    assert policies.of(AGENT) == "pin" and policies.of("other") == "latest"
    with pytest.raises(ValueError, match="AGENT=POLICY"):
        VersionPolicies.parse("compatible", ["writer=newest"])


@policy("pin")
async def test_a_restarted_replica_on_other_code_leaves_its_orphans_to_their_version(
    replicas: Replicas,
) -> None:
    await replicas.turns.StartTurn(
        pb.StartTurnRequest(turn_id="t-orphan", thread_id="th-orphan", agent=AGENT, input=value({}))
    )
    taken = await replicas.redrive("r-1", "i1", "v1")
    assert [t.turn.turn_id for t in taken.turns] == ["t-orphan"]
    # r-1 restarts running the new code: its orphan is re-driven, but not to it.
    again = await replicas.redrive("r-1", "i2", "removed")
    assert list(again.turns) == []
    status = await replicas.status("t-orphan")
    assert status.state == pb.TURN_STATE_RUNNING and status.attempts == 1
    assert status.waiting_for.fingerprint == version("v1").fingerprint
    # A replica of the old code starting up takes it.
    old = await replicas.redrive("r-2", "i1", "v1")
    assert [t.turn.turn_id for t in old.turns] == ["t-orphan"]
    assert old.turns[0].turn.owner.replica == "r-2"


async def announce(url: str, replica: str, variant: str) -> None:
    """What a bridge publishes on the agent's announce subject."""
    v = version(variant)
    nc = await nats.connect(url)
    try:
        body = {
            "agent": AGENT,
            "replica": replica,
            "incarnation": "i1",
            "graph": {"fingerprint": v.fingerprint, "label": v.label, "shape": v.shape},
        }
        await nc.publish(f"vystak.default.agents.{AGENT}.announce", json.dumps(body).encode())
        await nc.flush()
    finally:
        await nc.close()


async def listed(replicas: Replicas, want: int) -> pb.AgentVersions:
    """ListAgents' entry for the agent once it shows `want` replicas. The service
    hears an announcement on its own NATS connection, which nothing outside it can
    await, so this asks again until it shows (for at most 5 s)."""
    for _ in range(250):
        agents = (await replicas.turns.ListAgents(pb.ListAgentsRequest(agent=AGENT))).agents
        if agents and len(agents[0].replicas) >= want:
            return agents[0]
        await asyncio.sleep(0.02)
    raise AssertionError(f"ListAgents never showed {want} replica(s)")


@policy("pin")
async def test_agents_lists_replicas_and_waiting_turns_and_a_migration_moves_them(
    replicas: Replicas, nats_server: NatsServer
) -> None:
    await replicas.start_parked("t-move")
    await announce(nats_server.url, "r-new", "removed")
    entry = await listed(replicas, 1)
    removed, v1 = version("removed"), version("v1")
    assert entry.policy == "pin"
    assert [(r.replica, r.graph.fingerprint, r.graph.label) for r in entry.replicas] == [
        ("r-new", removed.fingerprint, "v2-removed")
    ]
    assert [(w.turn_id, w.waiting_for.fingerprint) for w in entry.waiting] == [
        ("t-move", v1.fingerprint)
    ]
    # A dry run moves nothing; a migration to a version no replica serves is refused.
    dry = await replicas.turns.MigrateTurns(
        pb.MigrateTurnsRequest(agent=AGENT, to_fingerprint=removed.fingerprint, dry_run=True)
    )
    assert list(dry.turn_ids) == ["t-move"]
    assert (await replicas.status("t-move")).waiting_for.fingerprint == v1.fingerprint
    message = await expect_code(
        replicas.turns.MigrateTurns(
            pb.MigrateTurnsRequest(agent=AGENT, to_fingerprint=version("reducer").fingerprint)
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
    )
    assert "no live replica" in message and removed.fingerprint[:12] in message
    await expect_code(
        replicas.turns.MigrateTurns(pb.MigrateTurnsRequest(agent=AGENT, to_fingerprint="v2")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    moved = await replicas.turns.MigrateTurns(
        pb.MigrateTurnsRequest(agent=AGENT, to_fingerprint=removed.fingerprint)
    )
    assert list(moved.turn_ids) == ["t-move"]
    turn = (await replicas.turns.GetTurn(pb.GetTurnRequest(turn_id="t-move"))).turn
    assert turn.graph.fingerprint == removed.fingerprint
    assert not turn.HasField("waiting_for")
    # The operator moved it on purpose: the new version may take it now, even under pin.
    claimed = await replicas.claim("t-move", "r-new", "removed")
    assert claimed.turn.owner.replica == "r-new"
    audit = await replicas.operations.ListAudit(operations_pb2.ListAuditRequest())
    outcomes = [(r.outcome, r.target) for r in audit.records if r.action == "migrate_turns"]
    assert outcomes == [
        ("ok", f"agent {AGENT} to {removed.fingerprint[:12]}"),
        ("FAILED_PRECONDITION", f"agent {AGENT} to {version('reducer').fingerprint[:12]}"),
    ]


async def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@policy("pin")
async def test_the_cli_lists_versions_and_waiting_turns_and_migrates_by_label(
    replicas: Replicas,
    versioned_service: TurnkeeperServer,
    nats_server: NatsServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    address = ("--address", versioned_service.address)
    await replicas.start_parked("t-cli")
    await announce(nats_server.url, "r-notes", "new-channel")
    await listed(replicas, 1)
    code, out, _ = await cli(capsys, "agents", *address)
    assert code == 0
    assert "writer  (version policy pin)" in out
    assert "r-notes" in out and "v2-notes" in out and version("new-channel").fingerprint[:12] in out
    assert "1 turn(s) no live replica may take:" in out
    assert "t-cli" in out and f'{version("v1").fingerprint[:12]} (label "v1")' in out
    code, out, _ = await cli(capsys, "turns", "status", "t-cli", "--json", *address)
    assert json.loads(out)["waiting_for"] == {
        "fingerprint": version("v1").fingerprint,
        "label": "v1",
    }
    code, out, _ = await cli(capsys, "agents", "--json", *address)
    [entry] = json.loads(out)["agents"]
    assert entry["waiting"][0]["turn_id"] == "t-cli"
    assert entry["waiting"][0]["label"] == "v1"

    # A version nobody serves: exit 2 and what is live.
    code, _, err = await cli(capsys, "agents", "migrate", AGENT, "--to", "v9", *address)
    assert code == 2 and "no live replica serves a version 'v9'" in err and "v2-notes" in err
    code, out, _ = await cli(
        capsys, "agents", "migrate", AGENT, "--to", "v2-notes", "--dry-run", *address
    )
    assert code == 0 and "would move 1 turn(s)" in out and "t-cli" in out
    code, out, _ = await cli(capsys, "agents", "migrate", AGENT, "--to", "v2-notes", *address)
    assert code == 0 and "moved 1 turn(s)" in out
    turn = (await replicas.turns.GetTurn(pb.GetTurnRequest(turn_id="t-cli"))).turn
    assert turn.graph.label == "v2-notes"
    code, out, _ = await cli(capsys, "turns", "show", "t-cli", *address)
    assert "graph:" in out and '(label "v2-notes")' in out


def new_graph_file(tmp_path: Path, variant: str) -> str:
    """A module holding one variant's graph, as a project's graph module would."""
    path = tmp_path / f"graph_{variant.replace('-', '_')}.py"
    path.write_text(
        f"from tests.support.versioned_graphs import build\ngraph = build({variant!r})[0]\n",
        encoding="utf-8",
    )
    return f"{path}:graph"


async def test_the_replay_check_reads_an_export_and_fails_on_a_thread_that_cannot_continue(
    replicas: Replicas,
    versioned_service: TurnkeeperServer,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    address = ("--address", versioned_service.address)
    await replicas.start_parked("t-ci")
    # A thread with a turn and no checkpoint: it starts from its input on any code.
    await replicas.turns.StartTurn(
        pb.StartTurnRequest(turn_id="t-fresh", thread_id="th-fresh", agent=AGENT, input=value({}))
    )
    export = tmp_path / "threads.json"
    code, out, _ = await cli(
        capsys, "threads", "export", "--agent", AGENT, "-o", str(export), *address
    )
    assert code == 0 and "2 thread(s) written" in out
    document = json.loads(export.read_text())
    assert [t["thread_id"] for t in document["threads"]] == ["th-fresh", "th-t-ci"]
    assert document["threads"][1]["stamp"]["next"] == ["ask"]

    code, out, _ = await cli(
        capsys,
        "replay-check",
        "--graph",
        new_graph_file(tmp_path, "new-channel"),
        "--threads",
        str(export),
    )
    assert code == 0, out
    assert "2 thread(s): 2 can continue, 0 cannot, 0 unchecked" in out

    code, out, _ = await cli(
        capsys,
        "replay-check",
        "--graph",
        new_graph_file(tmp_path, "removed"),
        "--threads",
        str(export),
        "--json",
    )
    assert code == 1
    verdicts = {t["thread_id"]: t for t in json.loads(out)["threads"]}
    assert verdicts["th-fresh"]["verdict"] == "ok"
    assert verdicts["th-t-ci"]["verdict"] == "cannot continue"
    assert verdicts["th-t-ci"]["written_by"].endswith('(label "v1")')
    assert any("node 'ask'" in r for r in verdicts["th-t-ci"]["reasons"])

    # Straight from the service, without a file.
    code, out, _ = await cli(
        capsys,
        "replay-check",
        "--graph",
        new_graph_file(tmp_path, "reducer"),
        "--agent",
        AGENT,
        *address,
    )
    assert code == 1 and "channel 'log' changed its reducer" in out

    # Bad input: exit 2 and why.
    (tmp_path / "other.json").write_text("{}")
    code, _, err = await cli(
        capsys,
        "replay-check",
        "--graph",
        new_graph_file(tmp_path, "v1"),
        "--threads",
        str(tmp_path / "other.json"),
    )
    assert code == 2 and "not a `turnkeeper threads export` file" in err
    code, _, err = await cli(
        capsys, "replay-check", "--graph", "graph.py", "--threads", str(export)
    )
    assert code == 2 and "--graph 'graph.py' must be 'path/to/file.py:name'" in err


def owned_start(turn_id: str, version_message: pb.GraphVersion | None) -> pb.StartTurnRequest:
    """StartTurn by an executor naming itself, as a bridge's responses/create does."""
    return pb.StartTurnRequest(
        turn_id=turn_id,
        thread_id=f"th-{turn_id}",
        agent=AGENT,
        input=value({}),
        replica="r-1",
        incarnation="i1",
        graph=version_message,
    )


async def test_a_turn_records_the_version_of_the_executor_that_started_it(
    replicas: Replicas,
) -> None:
    started = await replicas.turns.StartTurn(owned_start("t-own", graph("label")))
    assert started.turn.graph.fingerprint == version("label").fingerprint
    assert started.turn.graph.label == "v1.1"
    await expect_code(
        replicas.turns.StartTurn(owned_start("t-bad", pb.GraphVersion(fingerprint="not-hex"))),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
