"""A reduced mixed fault run: a LangGraph.js agent under the TypeScript TurnRunner
beside a Python agent under the bridge, on one service and one NATS, while both are
SIGKILLed and restarted at random moments.

Each language is its own agent (a thread belongs to one agent, and checkpoint
blobs do not cross serializers). Afterwards every turn is checked the way the fault
campaign checks its turns: DONE, retained seqs 1..last_seq with attempts never
going back, one terminal event and it is last, a Python TurnFollower's transcript
equal to what was retained, each step's event exactly once, and one rewind on NATS
per re-drive. The JS agent's `work` step acts through an effect (`charge`, policy
retry, which appends one line per execution to a side log: the receiver's count):
no execution after its outcome was recorded, one key for every execution of the
call, and the receipt the turn ends with is the recorded one. The seed is printed;
TURNKEEPER_FAULTS_SEED runs the same plan again.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client
from turnkeeper.client import AsyncTurnkeeperClient
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agent, result, until
from tests.support.nats import Collector, NatsServer
from tests.support.node import NodeAgents, Watcher
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

JS_AGENT = "js-mixed"
PY_AGENT = "py-mixed"
TURNS = 4  # per language
RANDOM_KILLS = 4


@pytest.fixture
async def service(make_service: ServiceFactory, nats_server: NatsServer) -> TurnkeeperServer:
    """A re-drive cap above the run's kill count: one turn can be orphaned by every
    kill (its replica is killed again before it finishes), and failing it at the
    default cap of 3 would be the cap working, not a violation. This run checks
    that every turn survives and is seen once, so no kill plan may reach the cap."""
    return await make_service(nats_url=nats_server.url, max_redrives=RANDOM_KILLS + 2)


class Replica:
    """One agent replica; restarted under the same name, so its new incarnation
    re-drives the turns the killed one left behind."""

    def __init__(self, spawn: Callable[[], Awaitable[Agent]]) -> None:
        self.spawn = spawn
        self.current: Agent | None = None
        self.retired: list[Agent] = []
        self.kills = 0

    async def start(self) -> None:
        self.current = await self.spawn()
        await self.current.ready()

    async def kill_and_restart(self) -> None:
        assert self.current is not None
        await self.current.kill()
        self.kills += 1
        self.retired.append(self.current)
        await self.start()

    async def close(self) -> None:
        for agent in [*self.retired, *([self.current] if self.current else [])]:
            await agent.close()


def check_turn(
    turn_id: str,
    status: turns_pb2.TurnStatusResponse,
    events: list[turns_pb2.Event],
    watcher: Watcher,
    rewinds: list[dict[str, Any]],
    steps: list[str],
) -> list[str]:
    """The campaign's per-turn invariants; returns the violations."""
    problems: list[str] = []

    def expect(ok: bool, what: str) -> None:
        if not ok:
            problems.append(f"{turn_id}: {what}")

    expect(status.state == turns_pb2.TURN_STATE_DONE, f"ended {status.state}")
    expect([e.seq for e in events] == list(range(1, status.last_seq + 1)), "seqs not 1..last_seq")
    attempts = [e.attempt for e in events]
    expect(attempts == sorted(attempts), "an older attempt wrote after a newer")
    terminals = [i for i, e in enumerate(events) if e.type in ("turn.done", "turn.failed")]
    expect(terminals == [len(events) - 1], f"terminal events at {terminals} of {len(events)}")
    retained = [(e.seq, e.type, json.loads(e.data_json)) for e in events]
    shown = [(e.seq, e.type, e.data) for e in watcher.transcript.events]
    expect(shown == retained, "the follower's transcript is not what was retained")
    ran = [json.loads(e.data_json)["node"] for e in events if e.type == "step"]
    expect(ran == steps, f"step events {ran}, not {steps} once each")
    expect(
        len(rewinds) == status.attempts, f"{len(rewinds)} rewinds for {status.attempts} re-drives"
    )
    return problems


async def test_js_and_python_agents_side_by_side_under_random_kills(
    js_agents: NodeAgents,
    bus: tuple[Client, Collector],
    service: TurnkeeperServer,
    nats_server: NatsServer,
    client: AsyncTurnkeeperClient,
    tmp_path: Path,
) -> None:
    env_seed = os.environ.get("TURNKEEPER_FAULTS_SEED")
    seed = int(env_seed) if env_seed else random.SystemRandom().randrange(2**32)
    print(f"mixed fault run seed {seed}")
    rng = random.Random(seed)
    nc, seen = bus

    async def spawn_js() -> Agent:
        return await js_agents.spawn(
            "js-mixed-1",
            agent=JS_AGENT,
            side_log=tmp_path / "js-side.log",
            step_ms=300,
            graph="effects",
            extra_env={"EFFECT_POLICY": "retry"},
        )

    async def spawn_py() -> Agent:
        return await Agent.spawn(
            service=service.address,
            nats_url=nats_server.url,
            replica="py-mixed-1",
            side_file=tmp_path / "py-side.log",
            agent=PY_AGENT,
        )

    js, py = Replica(spawn_js), Replica(spawn_py)
    watchers: dict[str, Watcher] = {}
    try:
        await asyncio.gather(js.start(), py.start())
        for i in range(TURNS):
            for agent, turn_id, job in (
                (JS_AGENT, f"js-mix-{i}", f"job-{i}"),
                (PY_AGENT, f"py-mix-{i}", {"job": f"job-{i}", "results": []}),
            ):
                created = await result(
                    nc,
                    "responses/create",
                    {"input": job, "turn_id": turn_id, "background": True},
                    agent=agent,
                )
                assert created["turn_id"] == turn_id
                watchers[turn_id] = Watcher(client, turn_id)

        # The first kill lands mid-step for sure: a JS turn is inside `work`.
        await watchers["js-mix-0"].until_event("token", "work")
        await js.kill_and_restart()
        for _ in range(RANDOM_KILLS):
            # A random moment: the injection itself, not synchronisation.
            await asyncio.sleep(rng.uniform(0.1, 0.6))
            await (js if rng.random() < 0.7 else py).kill_and_restart()

        problems: list[str] = []
        redriven = 0
        for turn_id, watcher in watchers.items():
            await watcher.finished()
            await until(seen, functools.partial(done_on_nats, seen, turn_id))
            status = await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
            events = list(
                (await client.list_events(turns_pb2.ListEventsRequest(turn_id=turn_id))).events
            )
            redriven += status.attempts > 0
            steps = (
                ["plan", "work", "answer"]
                if turn_id.startswith("js-")
                else ["step1", "step2", "step3", "step4"]
            )
            rewinds = rewinds_of(seen, turn_id)
            problems += check_turn(turn_id, status, events, watcher, rewinds, steps)
            if turn_id.startswith("js-"):
                effects = await client.list_effects(turns_pb2.ListEffectsRequest(turn_id=turn_id))
                problems += check_effects(
                    turn_id, list(effects.effects), events, tmp_path / "js-side.log"
                )
        assert not problems, f"seed {seed}:\n" + "\n".join(problems)
        assert js.kills >= 1 and redriven >= 1
    finally:
        for w in watchers.values():
            await w.close()
        await js.close()
        await py.close()


def check_effects(
    turn_id: str, effects: list[turns_pb2.Effect], events: list[turns_pb2.Event], side_log: Path
) -> list[str]:
    """Exactly-once effects (docs/effects.md) against the side log's count."""
    executions = [
        (int(attempt), key)
        for kind, turn, attempt, key in (
            line.split() for line in side_log.read_text().splitlines() if line.startswith("charge ")
        )
        if turn == turn_id and kind == "charge"
    ]
    final = [json.loads(e.data_json)["output"]["log"] for e in events if e.type == "final"]
    receipts = (
        [json.loads(entry.split(":", 1)[1]) for entry in final[-1] if entry.startswith("receipt:")]
        if final
        else []
    )
    done = [e for e in effects if e.state == turns_pb2.EFFECT_STATE_DONE]
    problems = []
    if len(done) != 1:
        problems.append(f"{turn_id}: effects {[(e.key, e.state) for e in effects]}")
        return problems
    row = done[0]
    if {key for _, key in executions} != {row.key}:
        problems.append(f"{turn_id}: charge ran under {executions}, recorded under {row.key}")
    again = [attempt for attempt, _ in executions if attempt > row.attempt]
    if again:
        problems.append(f"{turn_id}: charge ran again in {again} after attempt {row.attempt}")
    if receipts != [{"charged": json.loads(row.args_json)["input"], "key": row.key}]:
        problems.append(f"{turn_id}: receipts {receipts} for effect {row.key}")
    return problems


def done_on_nats(seen: Collector, turn_id: str) -> bool:
    return any(m["type"] == "turn.done" for m in seen.on(f".turn.events.{turn_id}"))


def rewinds_of(seen: Collector, turn_id: str) -> list[dict[str, Any]]:
    return [m for m in seen.on(".turn.rewind") if m["turn_id"] == turn_id]
