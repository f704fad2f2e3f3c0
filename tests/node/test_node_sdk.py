"""The TypeScript SDK (clients/node) as its users get it: generated types that match
the protos, a LangGraph.js agent's parked turn resumed by an operator and by the
Python session client, and the `npm pack` tarball installed outside the repository.

Real parts throughout: the service in-process on port 0, a real nats-server, the
agent (clients/node/testing/agent.mjs) and npm as subprocesses.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import grpc.aio
import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.panel.agent_rpc import NatsAgentTransport
from turnkeeper.v1 import turns_pb2, turns_pb2_grpc
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import result, rpc, until
from tests.support.grpcurl import grpcurl
from tests.support.nats import Collector, NatsServer
from tests.support.node import NO_PROXY_ENV, NODE, NPM, NodeAgents, run_command
from tests.support.procs import ServiceProcess
from tests.support.security import CertificateAuthority, write_tokens

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

AGENT = "js-approval"


async def test_the_committed_typescript_is_what_the_protos_generate_and_drift_fails(
    node_package: Path,
) -> None:
    assert NPM is not None
    code, stdout, stderr = await run_command([NPM, "run", "check-generated"], node_package)
    assert code == 0, stdout + stderr
    assert "src/gen matches protos/" in stdout

    generated = node_package / "src" / "gen" / "turnkeeper" / "v1" / "turns_pb.ts"
    original = generated.read_text()
    generated.write_text(original.replace("turn_id", "turn_key", 1))
    try:
        code, stdout, stderr = await run_command([NPM, "run", "check-generated"], node_package)
    finally:
        generated.write_text(original)
    assert code != 0
    assert "differs: src/gen/turnkeeper/v1/turns_pb.ts" in stderr
    assert "npm run generate" in stderr


def fetch(url: str) -> tuple[int, str]:
    # No proxy: the agent's /healthz is on loopback.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as response:
        return int(response.status), response.read().decode()


def events_on_nats(seen: Collector, turn_id: str) -> list[dict[str, Any]]:
    return seen.on(f".turn.events.{turn_id}")


async def park(nc: Any, seen: Collector, turn_id: str) -> None:
    """responses/create on the approval graph; returns once the turn is parked."""
    created = await result(
        nc,
        "responses/create",
        {
            "input": {"order": turn_id},
            "turn_id": turn_id,
            "thread_id": f"th-{turn_id}",
            "background": True,
        },
        agent=AGENT,
    )
    assert created == {"turn_id": turn_id, "thread_id": f"th-{turn_id}", "status": "in_progress"}
    await until(seen, lambda: any(m["type"] == "interrupt" for m in events_on_nats(seen, turn_id)))
    status = await result(nc, "responses/turnStatus", {"turn_id": turn_id}, agent=AGENT)
    assert status == {
        "turn_id": turn_id,
        "status": "parked",
        "state": "parked",
        "attempts": 0,
        "last_seq": 1,
        "error": "",
        # Why the service ended a turn (a cancel, a deadline); none yet.
        "end_reason": "",
    }


async def finished_output(seen: Collector, turn_id: str) -> Any:
    await until(seen, lambda: any(m["type"] == "turn.done" for m in events_on_nats(seen, turn_id)))
    (final,) = [m for m in events_on_nats(seen, turn_id) if m["type"] == "final"]
    return final["data"]["output"]


async def test_a_parked_js_turn_is_resumed_by_grpcurl_and_by_the_python_session_client(
    js_agents: NodeAgents,
    bus: tuple[Client, Collector],
    service: TurnkeeperServer,
    client: AsyncTurnkeeperClient,
) -> None:
    nc, seen = bus
    agent = await js_agents.start("js-approver", graph="approval")
    line = await agent.wait_line(lambda line: "/healthz on http://" in line)
    health = await asyncio.to_thread(fetch, line.rsplit(" ", 1)[1])
    assert health == (200, "ok\n")

    # An operator resumes with grpcurl, straight to the service.
    await park(nc, seen, "js-park-grpcurl")
    interrupt = [m for m in events_on_nats(seen, "js-park-grpcurl") if m["type"] == "interrupt"]
    assert interrupt[0]["data"]["value"] == {"question": 'approve {"order":"js-park-grpcurl"}?'}
    out = await grpcurl(
        service.address,
        "turnkeeper.v1.TurnService/ResumeDetached",
        data={"turn_id": "js-park-grpcurl", "resume": {"approved": "by grpcurl"}},
    )
    answer = json.loads(out.stdout)
    assert answer["turn"]["state"] == "TURN_STATE_RUNNING"
    assert answer.get("dispatched") is True
    output = await finished_output(seen, "js-park-grpcurl")
    assert output["log"] == ['decision:{"approved":"by grpcurl"}', "answered"]

    # The Python session client's transport, over the agent's NATS JSON-RPC.
    await park(nc, seen, "js-park-session")
    transport = NatsAgentTransport(nc, AGENT, client=client)
    await transport.resume("js-park-session", {"approved": "by the session"})
    output = await finished_output(seen, "js-park-session")
    assert output["log"] == ['decision:{"approved":"by the session"}', "answered"]
    done = await result(nc, "responses/turnStatus", {"turn_id": "js-park-session"}, agent=AGENT)
    assert done["status"] == "done"

    # Resuming a turn that is no longer parked is refused with the service's word.
    refused = await rpc(
        nc, "responses/resumeDetached", {"turn_id": "js-park-session", "resume": 1}, agent=AGENT
    )
    assert refused["error"]["code"] == -32000
    assert refused["error"]["data"]["code"] == "FAILED_PRECONDITION"

    # interrupt() comes first in `ask`: only the resumed run got past it (a
    # resume continues the same attempt).
    runs = js_agents.side_log.read_text().splitlines()
    assert runs == [
        "ask js-park-grpcurl 0",
        "answer js-park-grpcurl 0",
        "ask js-park-session 0",
        "answer js-park-session 0",
    ]


# What the package's README tells an agent to install beside it.
LANGGRAPH_PEERS = ("@langchain/langgraph", "@langchain/langgraph-checkpoint", "@langchain/core")

PACKED_AGENT = r"""
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { connect } from "nats";
import { TurnkeeperClient, followTurn } from "@turnkeeper/client";
import { TurnRunner, runnerConfigFromEnv } from "@turnkeeper/client/agent";

const State = Annotation.Root({
  log: Annotation({ reducer: (a, b) => a.concat(b), default: () => [] }),
});
const graph = new StateGraph(State)
  .addNode("greet", () => ({ log: ["hello"] }))
  .addNode("close", () => ({ log: ["bye"] }))
  .addEdge(START, "greet").addEdge("greet", "close").addEdge("close", END);

const runner = new TurnRunner(graph, runnerConfigFromEnv("packed-agent"), { log: () => undefined });
await runner.start();
const nc = await connect({ servers: process.env.TURNKEEPER_NATS_URL });
const request = { jsonrpc: "2.0", id: 1, method: "responses/create",
  params: { input: { log: [] }, turn_id: "packed-turn", thread_id: "packed-thread", background: true } };
const reply = JSON.parse(new TextDecoder().decode(
  (await nc.request("vystak.default.agents.packed-agent.tasks", JSON.stringify(request), { timeout: 10000 })).data));
console.log(JSON.stringify({ created: reply.result }));
const client = new TurnkeeperClient(process.env.TURNKEEPER_ADDRESS);
const followed = await followTurn(client, "packed-turn", { onFrame: (frame) => console.log(JSON.stringify(frame)) });
console.log(JSON.stringify({ outcome: followed.outcome }));
client.close();
await nc.close();
await runner.shutdown();
"""


async def test_the_npm_pack_tarball_installs_into_an_empty_directory_runs_and_follows_a_turn(
    node_package: Path, service: TurnkeeperServer, nats_server: NatsServer, tmp_path: Path
) -> None:
    assert NPM is not None and NODE is not None
    code, stdout, stderr = await run_command(
        [NPM, "pack", "--pack-destination", str(tmp_path)], node_package
    )
    assert code == 0, stdout + stderr
    # npm pack names the tarball on its last line of output.
    tarball = tmp_path / stdout.strip().splitlines()[-1]
    assert tarball.name.startswith("turnkeeper-client-") and tarball.suffix == ".tgz"

    app = tmp_path / "app"
    app.mkdir()
    (app / "package.json").write_text(
        json.dumps({"name": "app", "private": True, "type": "module"})
    )
    # LangGraph.js is an optional peer: an agent installs it beside the package, as the
    # package's README says.
    tgz = str(tarball)
    # --prefer-offline: from npm's cache where it has them (the package's own `npm ci`
    # filled it), so a registry that is slow to answer does not decide the test.
    code, stdout, stderr = await run_command(
        [
            NPM,
            "install",
            "--prefer-offline",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            tgz,
            *LANGGRAPH_PEERS,
        ],
        app,
    )
    assert code == 0, stdout + stderr
    installed = json.loads(
        (app / "node_modules" / "@turnkeeper" / "client" / "package.json").read_text()
    )
    assert installed["name"] == "@turnkeeper/client" and "private" not in installed
    (app / "agent.mjs").write_text(PACKED_AGENT)

    env = {
        "TURNKEEPER_ADDRESS": service.address,
        "TURNKEEPER_NATS_URL": nats_server.url,
        "TURNKEEPER_HEALTH_LISTEN": "127.0.0.1:0",
    }
    code, stdout, stderr = await run_command([NODE, "agent.mjs"], app, env=env, timeout=120)
    assert code == 0, stdout + stderr
    lines = [json.loads(line) for line in stdout.splitlines()]
    assert lines[0] == {
        "created": {"turn_id": "packed-turn", "thread_id": "packed-thread", "status": "in_progress"}
    }
    assert lines[-1] == {"outcome": "terminal"}
    events = [(f["type"], f["data"]) for f in lines if f.get("frame") == "event"]
    assert events == [
        ("step", {"node": "greet", "step": 1, "update": {"log": ["hello"]}}),
        ("step", {"node": "close", "step": 2, "update": {"log": ["bye"]}}),
        ("final", {"output": {"log": ["hello", "bye"]}}),
        ("turn.done", {}),
    ]

    # The package's bin, from the installed tarball, replays the finished turn.
    code, stdout, stderr = await run_command(
        [NPM, "exec", "--", "turnkeeper-follow", "--address", service.address, "packed-turn"],
        app,
        timeout=60,
    )
    assert code == 0, stdout + stderr
    frames = [json.loads(line) for line in stdout.splitlines()]
    assert frames[0]["frame"] == "status" and frames[0]["state"] == "DONE"
    assert [f["type"] for f in frames[1:]] == ["step", "step", "final", "turn.done"]


STATUS_SCRIPT = """
import { TurnkeeperClient, codeName, codeOf } from "./dist/index.js";

const client = new TurnkeeperClient();
try {
  const status = await client.turns.turnStatus({ turnId: "no-such-turn" });
  console.log(JSON.stringify({ ok: status.state }));
} catch (error) {
  const code = codeOf(error);
  console.log(JSON.stringify({ error: code === undefined ? String(error) : codeName(code) }));
} finally {
  client.close();
}
"""


async def test_the_node_client_speaks_mutual_tls_and_bearer_tokens(
    node_package: Path, make_service: Any, tmp_path: Path
) -> None:
    directory = tmp_path / "pki"
    directory.mkdir()
    ca = CertificateAuthority(directory, "ca")
    server_cert = ca.issue("server", server=True)
    client_cert = ca.issue("client", server=False)
    tokens = write_tokens(tmp_path / "tokens.jsonl", {"panel": "panel"})
    server = await make_service(
        tls_cert=server_cert.cert,
        tls_key=server_cert.key,
        tls_client_ca=ca.files.cert,
        tokens_file=tmp_path / "tokens.jsonl",
    )
    assert NODE is not None
    full = {
        "TURNKEEPER_ADDRESS": f"localhost:{server.port}",
        "TURNKEEPER_TLS_CA": str(ca.files.cert),
        "TURNKEEPER_TLS_CLIENT_CERT": str(client_cert.cert),
        "TURNKEEPER_TLS_CLIENT_KEY": str(client_cert.key),
        "TURNKEEPER_TOKEN": tokens["panel"],
    }

    async def answer(env: dict[str, str]) -> Any:
        code, stdout, stderr = await run_command(
            [NODE, "--input-type=module", "-e", STATUS_SCRIPT], node_package, env=env, timeout=60
        )
        assert code == 0, stdout + stderr
        return json.loads(stdout.splitlines()[-1])

    # TURN_STATE_UNKNOWN is 5: the service answered, the turn is unknown.
    assert await answer(full) == {"ok": 5}
    assert await answer({**full, "TURNKEEPER_TOKEN": ""}) == {"error": "UNAUTHENTICATED"}
    assert await answer({**full, "TURNKEEPER_TOKEN": "tk-wrong"}) == {"error": "UNAUTHENTICATED"}
    # Without a client certificate the server ends the handshake: no answer at all
    # (Connect reports the reset connection as CANCELLED or UNAVAILABLE).
    no_cert = {**full, "TURNKEEPER_TLS_CLIENT_CERT": "", "TURNKEEPER_TLS_CLIENT_KEY": ""}
    assert (await answer(no_cert)).get("error") in {"CANCELLED", "UNAVAILABLE"}
    # A CA that did not sign the server's certificate is not trusted.
    stranger = CertificateAuthority(directory, "stranger")
    assert "error" in await answer({**full, "TURNKEEPER_TLS_CA": str(stranger.files.cert)})


async def test_a_js_agent_regenerates_and_continues_threads_like_the_python_bridge(
    js_agents: NodeAgents, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    await js_agents.start("js-regen-1", agent="js-regen")

    async def create(params: dict[str, Any]) -> dict[str, Any]:
        return await rpc(nc, "responses/create", {**params, "background": True}, agent="js-regen")

    first = await create({"input": "report", "turn_id": "regen-1", "thread_id": "th-regen"})
    assert first["result"]["status"] == "in_progress"
    answered = await finished_output(seen, "regen-1")
    assert answered == {"job": "report", "log": ["planned", "worked", "answered"]}

    # Nothing pending on a finished thread: no turn is started.
    nothing = await create({"input": None, "thread_id": "th-regen"})
    assert nothing["result"] == {
        "turn_id": None,
        "thread_id": "th-regen",
        "status": "completed",
    }

    # Regenerate: the latest input answered again from the graph's entry, so the
    # log is not appended to the first answer's.
    again = await create(
        {"input": None, "regenerate": True, "turn_id": "regen-2", "thread_id": "th-regen"}
    )
    assert again["result"]["status"] == "in_progress"
    assert await finished_output(seen, "regen-2") == answered
    runs = js_agents.side_log.read_text().splitlines()
    assert [r.split()[0] for r in runs if " regen-2 " in f"{r} "] == ["plan", "work", "answer"]

    refused = await create({"input": None, "regenerate": True, "thread_id": "th-never"})
    assert refused["error"]["code"] == -32000
    assert refused["error"]["data"] == {
        "code": "FAILED_PRECONDITION",
        "message": "thread th-never has no run to regenerate",
    }
    bad = await create({"input": "x", "regenerate": True, "thread_id": "th-regen"})
    assert bad["error"]["code"] == -32602
    reserved = await create({"input": {"__turnkeeper__": "regenerate"}})
    assert reserved["error"] == {
        "code": -32602,
        "message": "input: the top-level key '__turnkeeper__' is reserved",
    }


async def test_turnkeeper_follow_rides_out_a_service_restart_and_a_re_drive(
    node_package: Path, tmp_path: Path
) -> None:
    service = ServiceProcess(tmp_path / "data")
    await asyncio.to_thread(service.start)
    follower: asyncio.subprocess.Process | None = None
    try:
        channel = grpc.aio.insecure_channel(service.address)
        stub = turns_pb2_grpc.TurnServiceStub(channel)

        async def append(attempt: int, *kinds: str, first: int = 1) -> None:
            events = [
                turns_pb2.EventInput(seq=first + i, type=k, data_json=json.dumps({"n": first + i}))
                for i, k in enumerate(kinds)
            ]
            await stub.AppendEvents(
                turns_pb2.AppendEventsRequest(turn_id="t-restart", attempt=attempt, events=events)
            )

        await stub.StartTurn(
            turns_pb2.StartTurnRequest(
                turn_id="t-restart", thread_id="th", agent="py", replica="r", incarnation="i1"
            )
        )
        await append(0, "token", "step")

        assert NODE is not None
        follower = await asyncio.create_subprocess_exec(
            NODE,
            "dist/cli/follow.js",
            "--address",
            service.address,
            "--idle-seconds",
            "1",
            "t-restart",
            cwd=node_package,
            env={**os.environ, **NO_PROXY_ENV},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert follower.stdout is not None
        first = [json.loads(await follower.stdout.readline()) for _ in range(3)]
        assert [f["frame"] for f in first] == ["status", "event", "event"]

        # The service dies and comes back on the same port; meanwhile nothing is
        # shown. Then the executor's restart re-drives the turn from scratch.
        await channel.close(None)
        await asyncio.to_thread(service.kill)
        await asyncio.to_thread(service.start)
        channel = grpc.aio.insecure_channel(service.address)
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        await stub.Redrive(turns_pb2.RedriveRequest(agent="py", replica="r", incarnation="i2"))
        await append(1, "token", "step", "final")
        await stub.FinishTurn(
            turns_pb2.FinishTurnRequest(
                turn_id="t-restart", attempt=1, outcome=turns_pb2.OUTCOME_DONE
            )
        )
        stdout, stderr = await asyncio.wait_for(follower.communicate(), 60)
        await channel.close(None)
    finally:
        if follower is not None and follower.returncode is None:
            follower.kill()
            await follower.wait()
        await asyncio.to_thread(service.kill)

    assert follower.returncode == 0, stderr.decode()
    rest = [json.loads(line) for line in stdout.decode().splitlines()]
    resets = [f for f in rest if f["frame"] == "reset"]
    assert len(resets) == 1, rest
    after = rest[rest.index(resets[0]) + 1 :]
    shown = [(f["seq"], f["attempt"], f["type"]) for f in after if f["frame"] == "event"]
    assert shown == [(1, 1, "token"), (2, 1, "step"), (3, 1, "final"), (4, 1, "turn.done")]
