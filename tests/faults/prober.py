"""The campaign's own executor: it writes events and checkpoints through the
service without pause, also while the service is SIGKILLed or its disk refuses
writes, and remembers exactly which writes were acknowledged and how every other
one was refused. Its turn is unowned (no replica runs it), so nothing re-drives
it: every acknowledged write must be there at the end, byte for byte.

Calls go through a bare stub (no client-side retry), so each refusal's status is
the service's own: UNAVAILABLE is the only acceptable one, with "storage refused"
while the disk refuses writes.
"""

from __future__ import annotations

import asyncio
import functools
import json
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import grpc
from grpc import aio
from turnkeeper.errors import Unavailable
from turnkeeper.v1 import checkpoints_pb2, turns_pb2

from tests.faults.checks import Checks
from tests.faults.cluster import Cluster
from tests.support.turns import value

STORAGE = "storage refused"
# What the service says when PostgreSQL is away (the "disk" fault on that backend).
POSTGRES_AWAY = "PostgreSQL"
CALL_TIMEOUT = 10.0
# How long `verify` reads again while the service answers UNAVAILABLE. After a
# PostgreSQL restart the window ends at the prober's first acknowledged write, through
# one replica; the other's pool may still be reconnecting with psycopg_pool's back-off
# (1, 2, 4 s ...), its reader waiting out READER_BACKOFF, and the typed client's own
# retry of an idempotent read (five tries, 1.5 s of back-off at most) ends inside that.
# Nothing acknowledged is lost meanwhile: the database is restarting, and a read
# waits for it, as a person would.
READ_PATIENCE = 60.0
READ_BACKOFF = 0.2
RESTARTING = "the database is restarting"

T = TypeVar("T")


@dataclass(frozen=True)
class Refusal:
    started: float
    ended: float
    code: str
    details: str


@dataclass
class ProbeRound:
    turn_id: str
    thread_id: str
    events: dict[int, tuple[str, str]] = field(default_factory=dict)
    checkpoints: dict[str, bytes] = field(default_factory=dict)
    started: bool = False


class Prober:
    def __init__(self, cluster: Cluster, checks: Checks, seed: int) -> None:
        self.cluster = cluster
        self.checks = checks
        self.seed = seed
        self.refusals: list[Refusal] = []
        # (start, end) of each time the disk refused writes, from the injector.
        self.windows: list[tuple[float, float]] = []
        self.storage_refused = asyncio.Event()
        self.last_ack = 0.0
        self._acked = asyncio.Event()
        self.events_checked = 0
        self.checkpoints_checked = 0
        self._windows_checked = 0
        self._refusals_checked = 0

    @property
    def _storage(self) -> str:
        """How a refusal for want of storage reads on the cluster's backend."""
        return POSTGRES_AWAY if self.cluster.backend == "postgres" else STORAGE

    async def _call(self, what: str, call: Awaitable[Any]) -> Any:
        """The response, or None when refused (the refusal is recorded)."""
        started = time.monotonic()
        try:
            response = await call
        except aio.AioRpcError as err:
            refusal = Refusal(started, time.monotonic(), err.code().name, err.details() or "")
            self.refusals.append(refusal)
            if self._storage in refusal.details:
                self.storage_refused.set()
            if not self._may_time_out(err.code()):
                self.checks.expect(
                    err.code() == grpc.StatusCode.UNAVAILABLE,
                    f"prober {what}: {refusal.code}: {refusal.details} (only UNAVAILABLE is "
                    "right for a write the service could not make durable)",
                )
            return None
        self.last_ack = time.monotonic()
        self._acked.set()
        return response

    def _may_time_out(self, code: grpc.StatusCode) -> bool:
        """On PostgreSQL a write waits up to the service's connect timeout (5 s) for a
        connection before UNAVAILABLE, and the client retries UNAVAILABLE within its
        deadline: a write made while PostgreSQL is away may run out of its deadline
        instead. Accepted there only inside a storage window (verify_windows)."""
        return self.cluster.backend == "postgres" and code == grpc.StatusCode.DEADLINE_EXCEEDED

    async def acknowledged_after(self, moment: float, timeout: float) -> bool:
        """Until some write is acknowledged after ``moment``."""

        async def loop() -> None:
            while self.last_ack <= moment:
                self._acked.clear()
                await self._acked.wait()

        try:
            await asyncio.wait_for(loop(), timeout)
        except TimeoutError:
            return False
        return True

    async def run(self, round_: int, stop: asyncio.Event) -> ProbeRound:
        c = self.cluster
        assert c.turns is not None and c.checkpoints is not None
        rng = random.Random(f"{self.seed}:{round_}:probe")
        probe = ProbeRound(f"probe-r{round_}", f"probe-th-{round_}")
        start = turns_pb2.StartTurnRequest(
            turn_id=probe.turn_id, thread_id=probe.thread_id, agent="prober", input=value({})
        )
        while not probe.started:
            probe.started = await self._call("StartTurn", c.turns.StartTurn(start)) is not None
            if not probe.started:
                await asyncio.sleep(0.1)  # back-off while the service is down
        seq, n, parent = 1, 0, ""
        while not stop.is_set():
            batch = [
                turns_pb2.EventInput(
                    seq=seq + k, type="probe", data_json=json.dumps({"round": round_, "n": seq + k})
                )
                for k in range(3)
            ]
            request = turns_pb2.AppendEventsRequest(turn_id=probe.turn_id, attempt=0, events=batch)
            if await self._call(
                "AppendEvents", c.turns.AppendEvents(request, timeout=CALL_TIMEOUT)
            ):
                probe.events.update({e.seq: (e.type, e.data_json) for e in batch})
                seq += len(batch)
            if n % 4 == 3:
                checkpoint_id, blob = f"{n:08d}", rng.randbytes(512)
                put = checkpoints_pb2.PutCheckpointRequest(
                    thread_id=probe.thread_id,
                    checkpoint_id=checkpoint_id,
                    parent_checkpoint_id=parent,
                    checkpoint=checkpoints_pb2.TypedValue(type="bytes", data=blob),
                    metadata_json=json.dumps({"n": n}),
                    fence=checkpoints_pb2.TurnFence(turn_id=probe.turn_id, attempt=0),
                )
                if await self._call(
                    "PutCheckpoint", c.checkpoints.PutCheckpoint(put, timeout=CALL_TIMEOUT)
                ):
                    probe.checkpoints[checkpoint_id] = blob
                    parent = checkpoint_id
            n += 1
            await asyncio.sleep(rng.uniform(0.02, 0.08))  # the prober's pace (load)
        return probe

    async def finish(self, probe: ProbeRound) -> None:
        """FinishTurn, a compare-and-set: after a refusal, TurnStatus says whether
        it committed anyway (the answer may be what was lost)."""
        c = self.cluster
        assert c.turns is not None
        request = turns_pb2.FinishTurnRequest(
            turn_id=probe.turn_id, attempt=0, outcome=turns_pb2.OUTCOME_DONE
        )
        for _ in range(100):
            if await self._call("FinishTurn", c.turns.FinishTurn(request, timeout=CALL_TIMEOUT)):
                return
            status = await self._call(
                "TurnStatus", c.turns.TurnStatus(turns_pb2.TurnStatusRequest(turn_id=probe.turn_id))
            )
            if status is not None and status.state == turns_pb2.TURN_STATE_DONE:
                return
            await asyncio.sleep(0.1)  # back-off while the service is down
        self.checks.expect(False, f"prober: could not finish {probe.turn_id}")

    async def _read(self, what: str, read: Callable[[], Awaitable[T]]) -> T | None:
        """`read()`'s answer, read again while the service answers UNAVAILABLE (it
        cannot reach its database: PostgreSQL restarting, a replica's pool still
        reconnecting) for up to READ_PATIENCE; then one violation that says so, and
        None. Any other error is the service's answer and goes to the caller."""
        deadline = time.monotonic() + READ_PATIENCE
        while True:
            try:
                return await read()
            except Unavailable as exc:
                if time.monotonic() >= deadline:
                    self.checks.expect(
                        False,
                        f"prober {what}: UNAVAILABLE for {READ_PATIENCE:.0f} s after the "
                        f"round ({RESTARTING}, and never came back?): {exc}",
                    )
                    return None
            await asyncio.sleep(READ_BACKOFF)  # back-off while the database is away

    async def verify(self, probe: ProbeRound) -> None:
        """Every acknowledged write is there, unchanged; read once the service can
        read again (`_read`): a write it cannot read back yet is not a lost one."""
        c = self.cluster
        client = c.client
        assert client is not None
        stored: dict[int, tuple[str, str]] = {}
        after = 0
        while True:
            request = turns_pb2.ListEventsRequest(turn_id=probe.turn_id, after_seq=after)
            page = await self._read(
                f"ListEvents of {probe.turn_id}",
                functools.partial(client.list_events, request),
            )
            if page is None:
                return  # the violation is recorded: nothing to compare against
            if not page.events:
                break
            stored.update({e.seq: (e.type, e.data_json) for e in page.events})
            after = page.events[-1].seq
        for seq, event in probe.events.items():
            self.checks.expect(
                stored.get(seq) == event,
                f"prober {probe.turn_id}: acknowledged event seq {seq} is "
                f"{'missing' if seq not in stored else 'different'}",
            )
        self.events_checked += len(probe.events)
        for checkpoint_id, blob in probe.checkpoints.items():
            wanted = checkpoints_pb2.GetCheckpointRequest(
                thread_id=probe.thread_id, checkpoint_id=checkpoint_id
            )
            got = await self._read(
                f"GetCheckpoint {checkpoint_id} of {probe.thread_id}",
                functools.partial(client.get_checkpoint, wanted),
            )
            if got is None:
                return
            self.checks.expect(
                got.found and got.checkpoint.checkpoint.data == blob,
                f"prober {probe.thread_id}: acknowledged checkpoint {checkpoint_id} is "
                f"{'different' if got.found else 'missing'}",
            )
        self.checkpoints_checked += len(probe.checkpoints)

    def verify_windows(self) -> int:
        """Each time the disk refused writes, the prober's writes were refused with
        UNAVAILABLE "storage refused ..." and acknowledged again afterwards; no
        such refusal outside those times. Looks at what came since the last call;
        returns the storage refusals among it."""
        windows, self._windows_checked = self.windows[self._windows_checked :], len(self.windows)
        refusals, self._refusals_checked = (
            self.refusals[self._refusals_checked :],
            len(self.refusals),
        )
        storage = [r for r in refusals if self._storage in r.details]
        for start, end in windows:
            inside = [r for r in storage if r.started <= end and r.ended >= start]
            self.checks.expect(
                bool(inside), f"no write was refused while the disk refused writes ({start:.1f}s)"
            )
            self.checks.expect(
                # On PostgreSQL the window ends at that acknowledgement (injectors.py).
                self.last_ack >= end,
                "the service never acknowledged a write again after the disk",
            )
        for r in storage:
            self.checks.expect(
                any(r.started <= end and r.ended >= start for start, end in self.windows),
                f"prober: '{r.details}' when the disk was fine",
            )
        for r in refusals:
            if self._may_time_out(getattr(grpc.StatusCode, r.code)):
                self.checks.expect(
                    any(r.started <= end and r.ended >= start for start, end in self.windows),
                    f"prober: {r.code} when PostgreSQL was up (only UNAVAILABLE is right "
                    "for a write the service could not make durable)",
                )
        return len(storage)
