"""The bridge survives the death of its agent process: SIGKILL mid-step, a poison
turn, a replica that never comes back, a zombie, and NATS restarting meanwhile.

Agents are real subprocesses (tests/agents/job_agent.py) against a real service
and a real nats-server; the service's lease is 2 s, its claim window 1 s.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import nats
import pytest
from langgraph.checkpoint.base import empty_checkpoint
from nats.aio.client import Client
from turnkeeper.agent.saver import RemoteSaver, durable_config
from turnkeeper.client import AsyncTurnkeeperClient, ConnectionOptions
from turnkeeper.errors import StaleAttempt
from turnkeeper.v1 import checkpoints_pb2, turns_pb2
from turnkeeper_server.app import TurnkeeperServer

from tests.support.agents import Agents, Panel, agents_for, all_events, result, shape, until
from tests.support.nats import Collector, NatsServer
from tests.support.relay import Relay
from tests.support.service import ServiceFactory

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

JOB = {"job": "report", "results": []}


def events_on_nats(seen: Collector, turn_id: str) -> list[dict[str, Any]]:
    return seen.on(f".turn.events.{turn_id}")


def rewinds_on_nats(seen: Collector, turn_id: str) -> list[dict[str, Any]]:
    return [m for m in seen.on(".turn.rewind") if m["turn_id"] == turn_id]


def streaming(seen: Collector, turn_id: str, node: str) -> bool:
    return any(
        m["type"] == "token" and m["data"]["node"] == node for m in events_on_nats(seen, turn_id)
    )


async def status(client: AsyncTurnkeeperClient, turn_id: str) -> turns_pb2.TurnStatusResponse:
    return await client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))


async def created_and_watched(nc: Client, client: AsyncTurnkeeperClient, name: str) -> Panel:
    """The job as turn t-<name> of thread th-<name>, created in the background over
    NATS, and a panel watching it."""
    turn_id, thread_id = f"t-{name}", f"th-{name}"
    created = await result(
        nc,
        "responses/create",
        {"input": JOB, "turn_id": turn_id, "thread_id": thread_id, "background": True},
    )
    assert created == {"turn_id": turn_id, "thread_id": thread_id, "status": "in_progress"}
    panel = Panel()
    panel.start(client, turn_id)
    return panel


async def test_sigkill_mid_step_two_then_restart_finishes_with_an_exact_replay(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    first = await agents.start(slow_step=2)
    # The replacement imports while the first runs; its incarnation starts at go().
    second = await agents.spawn(warm=True)

    panel = await created_and_watched(nc, client, "crash")

    # Step 2 has streamed its reply (appended, mirrored to NATS) and now waits.
    await until(seen, lambda: streaming(seen, "t-crash", "step2"))
    await first.kill()
    await second.go()
    shown = await panel.ended()

    final = await status(client, "t-crash")
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_DONE, 1)

    # Completed steps ran once; step 2 (running at the crash) ran again.
    runs = Counter(line.rsplit(" attempt=", 1)[0] for line in agents.side())
    assert runs["start step1"] == 1 and runs["done step1"] == 1
    assert runs["start step2"] == 2 and runs["done step2"] == 1
    assert runs["start step3"] == runs["start step4"] == 1
    # The tool ran in the re-run's attempt, with that attempt's idempotency key.
    assert [line for line in agents.side() if "ledger" in line] == ["ledger step3 key=t-crash:3:1"]

    events = await all_events(client, "t-crash")
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    boundary = next(e.seq for e in events if e.type == "step" and '"step1"' in e.data_json)
    assert {e.attempt for e in events if e.seq <= boundary} == {0}
    assert {e.attempt for e in events if e.seq > boundary} == {1}

    # One rewind on NATS, to the end of step 1; the panel got one reset to it.
    await until(seen, lambda: events_on_nats(seen, "t-crash")[-1:][0]["type"] == "turn.done")
    rewinds = rewinds_on_nats(seen, "t-crash")
    assert len(rewinds) == 1
    assert rewinds[0]["seq"] == boundary and rewinds[0]["attempt"] == 1
    assert [r.seq for r in panel.resets] == [boundary]

    # The panel ends with exactly the retained events, which are exactly those
    # of an uninterrupted run of the same job.
    assert shown == shape(events)
    reference = await created_and_watched(nc, client, "ref")
    assert shown == await reference.ended()
    assert [t for _, t, _ in shown] == (
        ["token"] * 11 + ["step"]
        + ["token"] * 11 + ["step"]
        + ["token"] * 11 + ["tool_call_start", "tool_call_end", "step"]
        + ["token"] * 11 + ["step"]
        + ["final", "turn.done"]
    )  # fmt: skip


async def test_sigkill_while_a_parallel_branch_waits_replays_the_finished_branch_too(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    first = await agents.start(graph="fan-out")
    second = await agents.spawn(graph="fan-out", warm=True)
    panel = await created_and_watched(nc, client, "fan")

    # The fast branch finished (its writes saved against the last checkpoint) while
    # the slow one, in the same superstep, still runs.
    def fast_done() -> bool:
        events = events_on_nats(seen, "t-fan")
        return any(m["type"] == "step" and m["data"]["node"] == "fast" for m in events)

    await until(seen, lambda: fast_done() and streaming(seen, "t-fan", "slow"))
    await first.kill()
    await second.go()
    shown = await panel.ended()

    final = await status(client, "t-fan")
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
    assert shown == shape(await all_events(client, "t-fan"))
    assert [seq for seq, _, _ in shown] == list(range(1, len(shown) + 1))
    # Both branches' events are there once: text, then the step.
    steps = [data["node"] for _, t, data in shown if t == "step"]
    assert sorted(steps) == ["fast", "join", "slow", "step1"]
    for node in ("fast", "slow"):
        text = "".join(d["text"] for _, t, d in shown if t == "token" and d["node"] == node)
        assert text == f"the {node} branch of report"
    # The whole superstep that was running re-ran, the finished branch with it.
    runs = Counter(line.rsplit(" attempt=", 1)[0] for line in agents.side())
    assert (runs["start step1"], runs["start fast"], runs["start slow"]) == (1, 2, 2)
    assert (runs["done fast"], runs["done slow"], runs["start step4"]) == (2, 1, 1)


async def test_a_poison_turn_fails_after_three_redrives_and_never_runs_a_fifth_time(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    agent = await agents.start(graph="poison")
    spare = await agents.spawn(graph="poison", warm=True)
    panel = await created_and_watched(nc, client, "poison")

    # Each execution kills its own process; the same replica restarts each time.
    for death in range(4):
        assert await agent.wait_exit() == -signal.SIGKILL
        agent = spare
        if death < 3:
            spare = await agents.spawn(graph="poison", warm=True)
        await agent.go()
    await agent.ready()  # the fifth process: up, and not killed by the turn
    shown = await panel.ended()

    final = await status(client, "t-poison")
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_FAILED, 3)
    assert "re-drive cap" in final.error
    assert [line for line in agents.side() if line.startswith("poison")] == [
        f"poison run attempt={n}" for n in range(4)
    ]
    assert sum(line.startswith("start step1") for line in agents.side()) == 1

    # One synthetic terminal event, in WatchTurn and on NATS; three rewinds.
    assert [t for _, t, _ in shown].count("turn.failed") == 1
    assert shown[-1][1] == "turn.failed"
    await until(
        seen, lambda: any(m["type"] == "turn.failed" for m in events_on_nats(seen, "t-poison"))
    )
    terminal = [m for m in events_on_nats(seen, "t-poison") if m["type"].startswith("turn.")]
    assert [m["type"] for m in terminal] == ["turn.failed"]
    await until(seen, lambda: len(rewinds_on_nats(seen, "t-poison")) >= 3)
    assert [r["attempt"] for r in rewinds_on_nats(seen, "t-poison")] == [1, 2, 3]

    # The fifth process stops cleanly, having never run the turn.
    await agent.close()
    assert agent.proc.returncode == 0
    assert sum(line.startswith("poison") for line in agents.side()) == 4


async def test_a_replica_that_never_comes_back_is_taken_over_after_its_lease(
    agents: Agents, client: AsyncTurnkeeperClient, bus: tuple[Client, Collector]
) -> None:
    nc, seen = bus
    replicas = {name: await agents.spawn(name, slow_step=2) for name in ("replica-a", "replica-b")}
    for agent in replicas.values():
        await agent.ready()
    panel = await created_and_watched(nc, client, "lease")
    await until(seen, lambda: streaming(seen, "t-lease", "step2"))

    owner = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t-lease"))).turn.owner
    survivor_name = next(name for name in replicas if name != owner.replica)
    await replicas[owner.replica].kill()  # and never restarted

    shown = await panel.ended()
    final = await status(client, "t-lease")
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
    survivor = replicas[survivor_name]
    await survivor.wait_line(lambda line: "attempt=1: executing (lease-expired" in line)
    assert "t-lease" in (await survivor.wait_line(lambda line: "attempt=1: DONE" in line))
    runs = Counter(line.rsplit(" attempt=", 1)[0] for line in agents.side())
    assert runs["start step1"] == 1 and runs["start step2"] == 2 and runs["done step2"] == 1
    assert shown == shape(await all_events(client, "t-lease"))
    assert len(rewinds_on_nats(seen, "t-lease")) == 1


async def snapshot(
    client: AsyncTurnkeeperClient, turn_id: str, thread_id: str
) -> tuple[list[tuple[int, str, Any]], list[bytes], int]:
    """Everything a zombie could damage: events, checkpoints (with their writes)."""
    events = shape(await all_events(client, turn_id))
    checkpoints = [
        response.checkpoint.SerializeToString(deterministic=True)
        async for response in client.list_checkpoints(
            checkpoints_pb2.ListCheckpointsRequest(thread_id=thread_id)
        )
    ]
    return events, checkpoints, (await status(client, turn_id)).last_seq


async def test_a_zombie_executor_is_refused_everything_and_changes_nothing(
    agents: Agents,
    client: AsyncTurnkeeperClient,
    bus: tuple[Client, Collector],
    service: TurnkeeperServer,
) -> None:
    nc, seen = bus
    zombie = await agents.start("replica-z", slow_step=2)
    panel = await created_and_watched(nc, client, "zombie")
    await until(seen, lambda: streaming(seen, "t-zombie", "step2"))
    incarnation = (
        await client.get_turn(turns_pb2.GetTurnRequest(turn_id="t-zombie"))
    ).turn.owner.incarnation

    # Frozen, the executor stops heartbeating; its lease lapses and the turn is
    # re-driven while the process still holds it.
    zombie.signal(signal.SIGSTOP)
    await until(seen, lambda: bool(rewinds_on_nats(seen, "t-zombie")))
    heir = await agents.start("replica-h", slow_step=3, slow_attempt=1)
    # The heir waits in step 3 after its tool call, the last event before the wait.
    await until(
        seen, lambda: any(m["type"] == "tool_call_end" for m in events_on_nats(seen, "t-zombie"))
    )
    before = await snapshot(client, "t-zombie", "th-zombie")

    # The zombie wakes up mid-step and carries on: refused, it stops.
    zombie.signal(signal.SIGCONT)
    # Its first call after waking is refused, whichever it is: the overdue heartbeat,
    # or the flush of the events it buffered before it was frozen.
    await zombie.wait_line(
        lambda line: (
            re.search(r"attempt=0: (Heartbeat|AppendEvents) refused \(ABORTED", line) is not None
        )
    )
    await zombie.wait_line(lambda line: "attempt=0:" in line and "this execution stops" in line)

    # Every kind of write a zombie could still send, with its stale attempt.
    last = before[2]
    stale = (
        client.append_events(
            turns_pb2.AppendEventsRequest(
                turn_id="t-zombie",
                attempt=0,
                events=[turns_pb2.EventInput(seq=last + 1, type="token", data_json="{}")],
            )
        ),
        client.heartbeat(
            turns_pb2.HeartbeatRequest(
                turn_id="t-zombie", attempt=0, replica="replica-z", incarnation=incarnation
            )
        ),
        client.park_turn(turns_pb2.ParkTurnRequest(turn_id="t-zombie", attempt=0)),
        client.finish_turn(
            turns_pb2.FinishTurnRequest(
                turn_id="t-zombie", attempt=0, outcome=turns_pb2.OUTCOME_DONE
            )
        ),
        client.claim_turn(
            turns_pb2.ClaimTurnRequest(
                turn_id="t-zombie", attempt=1, replica="replica-z", incarnation=incarnation
            )
        ),
    )
    for write in stale:
        with pytest.raises(StaleAttempt):
            await write
    async with RemoteSaver(options=ConnectionOptions(target=service.address)) as saver:
        config = durable_config("th-zombie", "t-zombie", 0)
        current = await saver.aget_tuple(durable_config("th-zombie"))
        assert current is not None
        config["configurable"]["checkpoint_id"] = current.config["configurable"]["checkpoint_id"]
        with pytest.raises(StaleAttempt):
            await saver.aput(config, empty_checkpoint(), {}, {})
        with pytest.raises(StaleAttempt):
            await saver.aput_writes(config, [("results", ["zombie"])], "zombie-task")
    assert await snapshot(client, "t-zombie", "th-zombie") == before

    # The heir finishes the turn as if the zombie had never woken.
    heir.signal(signal.SIGUSR1)
    shown = await panel.ended()
    final = await status(client, "t-zombie")
    assert (final.state, final.attempts) == (turns_pb2.TURN_STATE_DONE, 1)
    assert shown == shape(await all_events(client, "t-zombie"))
    assert [line for line in agents.side() if line.startswith("done")] == [
        f"done step{n}" for n in range(1, 5)
    ]


async def test_nats_restarted_during_a_redrive_still_delivers_the_rewind_once(
    make_service: ServiceFactory, nats_server: NatsServer, tmp_path: Path
) -> None:
    # The service reaches NATS through a relay, so the test decides when it gets
    # back to the restarted server: after this test's subscriber, which then sees
    # everything the outbox publishes.
    relay = Relay(nats_server.port)
    await relay.start()
    service = await make_service(nats_url=relay.url)
    back = asyncio.Event()

    async def reconnected() -> None:
        back.set()

    watcher = await nats.connect(
        nats_server.url,
        reconnected_cb=reconnected,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.1,
    )
    seen = Collector()
    await watcher.subscribe("vystak.turn.>", cb=seen.handler)
    await watcher.flush()
    options = ConnectionOptions(target=service.address)
    try:
        async with (
            AsyncTurnkeeperClient(options) as client,
            agents_for(service.address, nats_server.url, tmp_path / "side.log") as agents,
        ):
            first = await agents.start(slow_step=2)
            second = await agents.spawn(warm=True)
            panel = await created_and_watched(watcher, client, "nats")
            await until(seen, lambda: streaming(seen, "t-nats", "step2"))

            # NATS goes down and the agent dies. Its restart waits for its own
            # /healthz 200 (NATS included) before the re-drive, so NATS comes back
            # for the agents and this watcher but not yet for the service: the
            # re-driven turn finishes and its rewind waits in the outbox.
            relay.shut()
            nats_server.stop()
            await first.kill()
            await second.go()
            await second.wait_line(lambda line: "startup Redrive waits for /healthz" in line)
            assert not any("startup Redrive:" in line for line in second.lines)
            nats_server.start()
            await asyncio.wait_for(back.wait(), 30)
            await watcher.flush()
            await second.wait_line(lambda line: "startup Redrive: 1 turn(s)" in line)
            shown = await panel.ended()
            assert (await status(client, "t-nats")).state == turns_pb2.TURN_STATE_DONE
            assert service.outbox.backlog() > 0
            assert not rewinds_on_nats(seen, "t-nats")

            before_backlog = len(seen.messages)
            relay.open()
            await until(
                seen, lambda: any(m["type"] == "turn.done" for m in events_on_nats(seen, "t-nats"))
            )
            events = await all_events(client, "t-nats")
            boundary = next(e.seq for e in events if e.type == "step" and '"step1"' in e.data_json)
            rewinds = rewinds_on_nats(seen, "t-nats")
            assert [(r["seq"], r["attempt"]) for r in rewinds] == [(boundary, 1)]
            # The backlog drained once: each outbox row published once. (A message in
            # flight when the link was cut may come again, at-least-once by design:
            # its flush was never confirmed. Its Nats-Msg-Id lets JetStream drop it.)
            drained = [msg_id for _, _, msg_id in seen.messages[before_backlog:]]
            twice = [i for i, n in Counter(drained).items() if n > 1]
            assert all(drained) and not twice, f"published twice: {twice}"
            assert shown == shape(events)
            # The restarted agent's bridge is back on NATS too.
            await second.ready()
            assert (await result(watcher, "responses/turnStatus", {"turn_id": "t-nats"}))[
                "status"
            ] == "done"
    finally:
        await watcher.close()
        await relay.stop()
