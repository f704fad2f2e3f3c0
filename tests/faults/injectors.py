"""The faults. Each random choice comes from an RNG seeded by the campaign's seed,
the round and the fault, so a seed fixes the plan: which faults, in what order,
how far apart, how long each lasts. Where a kill lands in a turn is up to the
real processes' timing, which no seed fixes.

- agent SIGKILL: a random live replica, after a random gap; it restarts at once
  (its startup Redrive takes its turns back) or only after its lease lapsed (the
  reaper hands its turns to the other replicas over NATS);
- service SIGKILL under load: both files must pass ``integrity_check`` as the
  crash left them; restarted on the same port and data dir;
- NATS stopped or SIGKILLed, restarted on the same port;
- a zombie executor: a replica frozen (SIGSTOP) until one of its turns was
  re-driven away, then thawed: it carries on writing and must be refused; the
  harness then sends every kind of write in the zombie's name too (a store write
  under its fence among them);
- a disk that refuses writes: the service's RLIMIT_FSIZE lowered to 1 byte with
  prlimit(2), so every write(2) to its SQLite files fails with EFBIG (what a full
  disk does to SQLite); then raised again, without a restart.

On PostgreSQL the service SIGKILL strikes one replica at random (the clients carry
on through the other), and a PostgreSQL restart (a fast shutdown that cuts every
connection mid-transaction, then a start) takes the disk's place: while it is down
every write is refused with UNAVAILABLE naming PostgreSQL, and none acknowledged
may be missing after.
"""

from __future__ import annotations

import asyncio
import random
import resource
import signal
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field

import grpc
from grpc import aio
from turnkeeper.v1 import checkpoints_pb2, store_pb2, turns_pb2

from tests.faults.checks import Checks
from tests.faults.cluster import AGENT, Cluster
from tests.faults.prober import Prober
from tests.support.agents import Agent

BIG_FAULTS = ("kill_service", "restart_nats", "zombie", "disk_full", "rolling_upgrade")
POSTGRES_FAULTS = ("kill_service", "restart_nats", "zombie", "restart_postgres", "rolling_upgrade")
# How the service refuses a write from an attempt that was re-driven away.
_FENCED = frozenset({grpc.StatusCode.ABORTED, grpc.StatusCode.FAILED_PRECONDITION})


@dataclass
class Zombie:
    agent: Agent
    # turn_id -> the attempt the frozen executor held.
    held: dict[str, int]
    # Output lines of the agent before it was thawed.
    thawed_at: int
    # Writes the harness made in the zombie's name after the re-drive: all refused.
    refused: int = 0


@dataclass
class Counts:
    agent_kills: int = 0
    late_restarts: int = 0
    service_kills: int = 0
    nats_restarts: int = 0
    zombies: list[Zombie] = field(default_factory=list)
    disk_windows: int = 0
    # Rolling upgrades: every replica replaced, one by one, with a new graph version.
    upgrades: int = 0
    # When each fault struck and ended, for a person reading a violation.
    timeline: list[str] = field(default_factory=list)


class Injector:
    def __init__(
        self, cluster: Cluster, checks: Checks, prober: Prober, counts: Counts, seed: int
    ) -> None:
        self.cluster = cluster
        self.checks = checks
        self.prober = prober
        self.counts = counts
        self.seed = seed

    def mark(self, what: str) -> None:
        now = time.time()
        stamp = time.strftime("%H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1000):03d}"
        self.counts.timeline.append(f"{stamp} {what}")

    def _rng(self, round_: int, what: str) -> random.Random:
        return random.Random(f"{self.seed}:{round_}:{what}")

    async def kill_agents(
        self, round_: int, count: int, gap: tuple[float, float], late_share: float
    ) -> None:
        rng = self._rng(round_, "kills")
        lease = self.cluster.lease_seconds
        for _ in range(count):
            await asyncio.sleep(rng.uniform(*gap))  # the random kill point
            slot = rng.choice(await self.cluster.pool.any_killable())
            late = rng.random() < late_share
            delay = rng.uniform(lease + 1, 2 * lease) if late else 0.0
            assert slot.current is not None
            self.mark(
                f"SIGKILL agent {slot.replica} pid {slot.current.proc.pid}, back in {delay:.1f}s"
            )
            self.cluster.pool.kill(slot, delay)
            self.counts.agent_kills += 1
            self.counts.late_restarts += late

    async def big_faults(self, round_: int, faults: list[str], gap: tuple[float, float]) -> None:
        rng = self._rng(round_, "big")
        order = list(faults)
        rng.shuffle(order)
        for name in order:
            await asyncio.sleep(rng.uniform(*gap))  # when it strikes
            fault = {
                "kill_service": self.kill_service,
                "restart_nats": self.restart_nats,
                "zombie": self.zombie,
                "disk_full": self.disk_full,
                "restart_postgres": self.restart_postgres,
                "rolling_upgrade": self.rolling_upgrade,
            }[name]
            try:
                await fault(rng)
            except Exception as exc:  # the harness could not inject it: say so, go on
                self.checks.expect(False, f"injecting {name} failed: {exc!r}")

    async def rolling_upgrade(self, rng: random.Random) -> None:
        """Every replica replaced, one by one, with the next version of the graph (its
        label: v1, v2 ...), while turns run and park; the next replica goes once the
        new one is up, as a deploy waits for readiness. Under `compatible` (the
        default) a label-only change may continue every turn. Under `pin` a new label
        is an incompatible version: the last replica stays on v1, so that every turn
        started on v1 finishes there (or waits for it), and the others go to v2."""
        pool = self.cluster.pool
        pinned = self.cluster.version_policy == "pin"
        label = "v2" if pinned else f"v{self.counts.upgrades + 2}"
        for slot in pool.slots[:-1] if pinned else pool.slots:
            await asyncio.sleep(rng.uniform(0.1, 0.5))
            await slot.up.wait()
            if slot.paused or slot.killed:
                continue  # a frozen zombie, or one being killed: it keeps its version
            self.mark(f"upgrade agent {slot.replica} to {label}")
            old = await pool.upgrade(slot, label)
            await asyncio.wait_for(pool.replaced(slot, old), 120)
        self.counts.upgrades += 1

    async def kill_service(self, rng: random.Random) -> None:
        c = self.cluster
        index = rng.randrange(len(c.services))
        self.mark(f"SIGKILL service {index}")
        c.kill_service(index)
        self.counts.service_kills += 1
        for sound, found in c.storage.integrity():
            self.checks.expect(sound, f"after a service SIGKILL: {found}")
        await asyncio.sleep(rng.uniform(0, 1.0))  # how long it stays down
        await c.restart_service(index)
        self.mark(f"service {index} restarted")

    async def restart_postgres(self, rng: random.Random) -> None:
        """PostgreSQL stopped under load, then started: a storage window like the
        full disk's, with refusals that name PostgreSQL."""
        c = self.cluster
        start = time.monotonic()
        self.prober.storage_refused.clear()
        await c.stop_postgres()
        self.mark("PostgreSQL stopped")
        try:
            try:
                await asyncio.wait_for(self.prober.storage_refused.wait(), 15)
                refused = True
            except TimeoutError:
                refused = False
            self.checks.expect(
                refused, "the service went on acknowledging writes without PostgreSQL"
            )
            await asyncio.sleep(rng.uniform(0.5, 2.0))  # how long it stays down
        finally:
            await c.start_postgres()
            self.mark("PostgreSQL started")
        end = time.monotonic()
        self.counts.disk_windows += 1
        recovered = await self.prober.acknowledged_after(end, 30)
        self.checks.expect(
            recovered, "the service did not acknowledge writes again after PostgreSQL"
        )
        # The window lasts until the service acknowledged a write again, not until
        # PostgreSQL was up: its pool reconnects with psycopg_pool's backoff (1, 2,
        # 4 s, ...), and until then it refuses, rightly, naming PostgreSQL. A loaded
        # machine (the whole suite at once) stretched that past the restart.
        self.prober.windows.append((start, self.prober.last_ack if recovered else end))

    async def restart_nats(self, rng: random.Random) -> None:
        c = self.cluster
        kill = rng.random() < 0.5
        self.mark(f"NATS: service held, cut off, then {'SIGKILL' if kill else 'stop'}")
        await c.stop_nats(kill=kill)
        self.mark("NATS down")
        await asyncio.sleep(rng.uniform(0.5, 2.0))  # how long it stays down
        await c.start_nats()
        self.mark("NATS back, service let in")
        self.counts.nats_restarts += 1

    async def zombie(self, rng: random.Random) -> None:
        c = self.cluster
        assert c.client is not None
        slot = rng.choice(await c.pool.any_killable())
        agent = slot.current
        assert agent is not None
        slot.paused = True
        self.mark(f"SIGSTOP agent {slot.replica} pid {agent.proc.pid}")
        agent.signal(signal.SIGSTOP)
        try:
            running = await c.client.list_turns(
                turns_pb2.ListTurnsRequest(state=turns_pb2.TURN_STATE_RUNNING, agent=AGENT)
            )
            mine = [t for t in running.turns if t.owner.replica == slot.replica]
            held = {t.turn_id: t.attempts for t in mine}

            def redriven_away() -> bool:
                return any(attempt > held[t] for t in held for _, attempt in c.mirror.rewinds(t))

            if held:
                # Frozen until the service re-drove one of its turns to someone else.
                await c.mirror.wait_for(redriven_away, timeout=6 * c.lease_seconds)
            else:
                await asyncio.sleep(c.lease_seconds + 1)  # frozen past its lease anyway
        finally:
            thawed_at = len(agent.lines)
            self.mark(f"SIGCONT agent {slot.replica} pid {agent.proc.pid}")
            agent.signal(signal.SIGCONT)
            slot.paused = False
        zombie = Zombie(agent, held, thawed_at)
        self.counts.zombies.append(zombie)
        for t in mine:
            if any(attempt > t.attempts for _, attempt in c.mirror.rewinds(t.turn_id)):
                zombie.refused += await self.stale_writes(t.turn_id, t.thread_id, t.attempts)

    async def stale_writes(self, turn_id: str, thread_id: str, attempt: int) -> int:
        """Every kind of write the zombie could still send for its attempt, each of
        which must be refused (ABORTED, or FAILED_PRECONDITION once the turn ended)
        and change nothing. Returns how many were refused."""
        c = self.cluster
        assert c.turns is not None and c.checkpoints is not None and c.store is not None
        status = await c.turns.TurnStatus(turns_pb2.TurnStatusRequest(turn_id=turn_id))
        fence = checkpoints_pb2.TurnFence(turn_id=turn_id, attempt=attempt)
        blob = checkpoints_pb2.TypedValue(type="bytes", data=b"zombie")
        event = turns_pb2.EventInput(
            seq=status.last_seq + 1, type="token", data_json='{"node": "zombie", "text": "boo"}'
        )
        writes: list[tuple[str, Awaitable[object]]] = [
            (
                "AppendEvents",
                c.turns.AppendEvents(
                    turns_pb2.AppendEventsRequest(turn_id=turn_id, attempt=attempt, events=[event])
                ),
            ),
            (
                "PutCheckpoint",
                c.checkpoints.PutCheckpoint(
                    checkpoints_pb2.PutCheckpointRequest(
                        thread_id=thread_id,
                        checkpoint_id="zzzzzzzz-zombie",
                        checkpoint=blob,
                        metadata_json="{}",
                        fence=fence,
                    )
                ),
            ),
            (
                "PutWrites",
                c.checkpoints.PutWrites(
                    checkpoints_pb2.PutWritesRequest(
                        thread_id=thread_id,
                        checkpoint_id="zzzzzzzz-zombie",
                        task_id="zombie",
                        writes=[checkpoints_pb2.WriteInput(idx=0, channel="results", value=blob)],
                        fence=fence,
                    )
                ),
            ),
            (
                "StoreBatch",
                c.store.StoreBatch(
                    store_pb2.StoreBatchRequest(
                        operations=[
                            store_pb2.StoreOperation(
                                put=store_pb2.StorePut(
                                    namespace=["faults", turn_id],
                                    key="zombie",
                                    value_json=f'{{"attempt": {attempt}}}',
                                )
                            )
                        ],
                        fence=fence,
                    )
                ),
            ),
            (
                "ParkTurn",
                c.turns.ParkTurn(turns_pb2.ParkTurnRequest(turn_id=turn_id, attempt=attempt)),
            ),
            (
                "FinishTurn",
                c.turns.FinishTurn(
                    turns_pb2.FinishTurnRequest(
                        turn_id=turn_id, attempt=attempt, outcome=turns_pb2.OUTCOME_DONE
                    )
                ),
            ),
        ]
        refused = 0
        for what, call in writes:
            try:
                await call
            except aio.AioRpcError as err:
                refused += self.checks.expect(
                    err.code() in _FENCED,
                    f"{turn_id}: the zombie's {what} (attempt {attempt}) refused with "
                    f"{err.code().name}: {err.details()}",
                )
            else:
                self.checks.expect(
                    False, f"{turn_id}: the zombie's {what} (attempt {attempt}) was accepted"
                )
        return refused

    async def disk_full(self, rng: random.Random) -> None:
        c = self.cluster
        assert c.service is not None and c.service.process is not None
        pid = c.service.process.pid
        soft, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        start = time.monotonic()
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, hard))
        self.mark("disk refuses writes")
        self.prober.storage_refused.clear()
        try:
            try:
                await asyncio.wait_for(self.prober.storage_refused.wait(), 15)
                refused = True
            except TimeoutError:
                refused = False
            self.checks.expect(refused, "the service went on acknowledging writes with no disk")
            await asyncio.sleep(rng.uniform(0.5, 2.0))  # how long the disk stays full
        finally:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (soft, hard))
            self.mark("disk takes writes again")
        end = time.monotonic()
        self.prober.windows.append((start, end))
        self.counts.disk_windows += 1
        recovered = await self.prober.acknowledged_after(end, 30)
        self.checks.expect(recovered, "the service did not acknowledge writes again after the disk")
