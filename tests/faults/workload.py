"""Turns, sent the way a channel sends them (JSON-RPC ``responses/create`` over
NATS to the agents' queue group), each watched by the panel's follower, a raw
WatchTurn stream and sometimes a late joiner. Approval turns park; most are
resumed (``responses/resumeDetached``), the rest stay parked.

Faults make requests fail: NATS is down, no replica is alive, the agent died
before answering, the service refused. Every such request is sent again with the
same ``turn_id`` (the idempotency key) until it is answered.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from typing import Any

import nats.errors
from turnkeeper.errors import TurnkeeperError
from turnkeeper.panel.follower import (
    ConclusionReason,
    FollowOptions,
    TurnFollower,
    is_transient,
)
from turnkeeper.v1 import turns_pb2

from tests.faults.checks import Checks
from tests.faults.cluster import AGENT, Cluster
from tests.faults.watchers import Followed, RawWatch, Shown
from tests.support.agents import rpc

# What a -32000 answer may carry and still be worth sending again.
_RETRY_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "INTERNAL", "UNKNOWN", "ABORTED"})
KIND_WEIGHTS = {"plain": 5, "fanout": 3, "approval": 2}


@dataclass
class TurnRun:
    turn_id: str
    thread_id: str
    kind: str
    round: int
    rng: random.Random
    created: bool = False
    # Its nodes keep a memory in the store (tests/faults/agent.py's `remember`).
    memory: bool = False
    leave_parked: bool = False
    resumed: bool = False
    started_at: float = 0.0
    ended_at: float = 0.0
    followed: Followed | None = None
    raws: list[RawWatch] = field(default_factory=list)


class Workload:
    """Keeps ``concurrency`` turns in flight until told to stop, then lets them end."""

    def __init__(
        self,
        cluster: Cluster,
        checks: Checks,
        *,
        seed: int,
        deadline: float,
        patience: float,
        memory_share: float = 0.0,
    ) -> None:
        self.cluster = cluster
        self.checks = checks
        self.seed = seed
        self.deadline = deadline
        self.patience = patience
        # The share of turns whose nodes write to the store.
        self.memory_share = memory_share
        self._threads: list[str] = []
        self._thread_count = 0

    def _thread(self) -> str:
        """A thread with no live turn: turns reuse threads across rounds (a thread's
        second turn starts on the checkpoints of its first), except a thread whose
        turn stayed parked."""
        if self._threads:
            return self._threads.pop(0)
        self._thread_count += 1
        return f"th-{self._thread_count}"

    async def run(
        self,
        round_: int,
        *,
        at_least: int,
        at_most: int,
        concurrency: int,
        poison: int,
        faults_done: asyncio.Event,
    ) -> list[TurnRun]:
        rng = random.Random(f"{self.seed}:{round_}:turns")
        poison_at = set(rng.sample(range(at_least), min(poison, at_least)))
        kinds, weights = list(KIND_WEIGHTS), list(KIND_WEIGHTS.values())
        free = asyncio.Semaphore(concurrency)
        runs: list[TurnRun] = []
        tasks: list[asyncio.Task[None]] = []
        i = 0
        try:
            while i < at_least or (not faults_done.is_set() and i < at_most):
                await free.acquire()
                kind = "poison" if i in poison_at else rng.choices(kinds, weights)[0]
                run = TurnRun(
                    turn_id=f"r{round_}-t{i}-{kind}",
                    thread_id=self._thread(),
                    kind=kind,
                    round=round_,
                    rng=random.Random(f"{self.seed}:{round_}:{i}"),
                    memory=random.Random(f"{self.seed}:{round_}:{i}:memory").random()
                    < self.memory_share,
                )
                runs.append(run)
                task = asyncio.create_task(self._turn(run), name=run.turn_id)
                task.add_done_callback(lambda _: free.release())
                tasks.append(task)
                i += 1
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for task in tasks:  # the round ended early: its turns with it
                task.cancel()
            raise
        return runs

    # -- one turn -------------------------------------------------------------------------

    async def _turn(self, run: TurnRun) -> None:
        try:
            await self._run_turn(run)
        except Exception as exc:  # a failure no check foresaw is a violation too
            self.checks.expect(False, f"{run.turn_id}: following it raised {exc!r}")

    async def _run_turn(self, run: TurnRun) -> None:
        run.started_at = time.monotonic()
        if not await self._create(run):
            self._threads.append(run.thread_id)
            return
        run.leave_parked = run.kind == "approval" and run.rng.random() < 0.25
        c = self.cluster
        assert c.turns is not None
        raw = RawWatch(Shown(f"{run.turn_id} raw"))
        raw.start(c.turns, run.turn_id)
        run.raws.append(raw)
        late: asyncio.Task[None] | None = None
        if run.rng.random() < 0.3:
            late = asyncio.create_task(self._late_joiner(run, run.rng.uniform(0, 2.0)))
        await self._follow(run)
        run.ended_at = time.monotonic()
        if late is not None:
            await late
        if run.leave_parked:
            for r in run.raws:
                await r.stop()
        else:
            # Each raw stream ends by itself at the terminal event, or was cut.
            tasks = [r.task for r in run.raws if r.task is not None]
            _, pending = await asyncio.wait(tasks, timeout=self.patience)
            for r in run.raws:
                self.checks.expect(
                    r.task not in pending,
                    f"{run.turn_id}: {r.shown.name} still open {self.patience}s after the turn ended",
                )
                await r.stop()
        over = run.followed is not None and run.followed.reason is not ConclusionReason.DEADLINE
        if over and not run.leave_parked:
            self._threads.append(run.thread_id)  # the turn is over: the thread is free

    async def _create(self, run: TurnRun) -> bool:
        params = {
            "input": {"job": run.turn_id, "kind": run.kind, "results": [], "memory": run.memory},
            "turn_id": run.turn_id,
            "thread_id": run.thread_id,
            "background": True,
        }
        reply = await self._request("responses/create", params, run.turn_id)
        if reply is None:
            return False
        if "error" in reply:
            self.checks.expect(False, f"{run.turn_id}: responses/create refused: {reply['error']}")
            return False
        result = reply["result"]
        ok = result.get("turn_id") == run.turn_id and result.get("thread_id") == run.thread_id
        run.created = self.checks.expect(ok, f"{run.turn_id}: responses/create answered {result}")
        return run.created

    async def _request(self, method: str, params: dict[str, Any], what: str) -> Any:
        """Send until answered with a result (or a non-retryable error, a violation)."""
        assert self.cluster.nc is not None
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.deadline
        delay = 0.1
        while loop.time() < give_up:
            try:
                reply = await rpc(
                    self.cluster.nc,
                    method,
                    params,
                    agent=AGENT,
                    timeout=5,
                    caller=self.cluster.client,
                )
            except (nats.errors.Error, TimeoutError, OSError, TurnkeeperError):
                # NATS down, nobody subscribed, the agent died, or the service (down)
                # gave no caller assertion: the request was not answered.
                reply = None
            if reply is not None:
                if "result" in reply:
                    return reply
                code = reply["error"].get("data", {}).get("code", "")
                if code not in _RETRY_CODES:
                    return reply  # the caller decides
            await asyncio.sleep(delay)  # back-off between tries, not synchronisation
            delay = min(delay * 2, 1.0)
        self.checks.expect(False, f"{what}: {method} never answered in {self.deadline}s")
        return None

    async def _follow(self, run: TurnRun) -> None:
        c = self.cluster
        assert c.client is not None
        followed = Followed(Shown(f"{run.turn_id} follower"))
        run.followed = followed
        options = FollowOptions(idle_gap=1.0, deadline=self.deadline, reconnect_max=0.5)
        resume: asyncio.Task[None] | None = None
        async with TurnFollower(c.client, run.turn_id, options) as follower:
            async for frame in follower:
                followed.apply(frame)
                if followed.interrupted.is_set() and resume is None:
                    if run.leave_parked:
                        break
                    resume = asyncio.create_task(self._resume(run))
        if resume is not None:
            await resume
        if not run.leave_parked:
            self.checks.expect(
                followed.reason is not ConclusionReason.DEADLINE,
                f"{run.turn_id}: not over after {self.deadline}s (follower's deadline)",
            )

    async def _resume(self, run: TurnRun) -> None:
        params = {"turn_id": run.turn_id, "resume": {"approved": True}}
        reply = await self._request("responses/resumeDetached", params, run.turn_id)
        if reply is None:
            return
        if "result" in reply:
            run.resumed = True
            return
        # FAILED_PRECONDITION: not PARKED. Fine if an earlier try, whose answer was
        # lost, resumed it; a violation if it is still parked.
        status = await self._status(run.turn_id)
        if status is None:
            return
        run.resumed = self.checks.expect(
            status.state != turns_pb2.TURN_STATE_PARKED,
            f"{run.turn_id}: resumeDetached refused ({reply['error']}) while PARKED",
        )

    async def _status(self, turn_id: str) -> turns_pb2.TurnStatusResponse | None:
        """TurnStatus, asked again while the service cannot answer (a replica or
        PostgreSQL down is the fault at work, not a verdict on the turn)."""
        c = self.cluster
        assert c.client is not None
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.deadline
        delay = 0.1
        while True:
            try:
                return await c.client.turn_status(turns_pb2.TurnStatusRequest(turn_id=turn_id))
            except TurnkeeperError as err:
                if not is_transient(err) or loop.time() > give_up:
                    self.checks.expect(False, f"{turn_id}: TurnStatus failed: {err!r}")
                    return None
            await asyncio.sleep(delay)  # back-off between tries, not synchronisation
            delay = min(delay * 2, 1.0)

    async def _late_joiner(self, run: TurnRun, delay: float) -> None:
        """A second raw stream opened later, after a random seq already seen."""
        await asyncio.sleep(delay)  # a random join point: the injection, not a wait
        c = self.cluster
        assert c.client is not None and c.turns is not None
        try:
            status = await c.client.turn_status(turns_pb2.TurnStatusRequest(turn_id=run.turn_id))
        except Exception:
            return  # the service is down right now: no late joiner this time
        raw = RawWatch(Shown(f"{run.turn_id} late"), after_seq=run.rng.randint(0, status.last_seq))
        raw.start(c.turns, run.turn_id)
        run.raws.append(raw)
