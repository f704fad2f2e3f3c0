"""What must hold after every round, whatever was injected:

- no turn is lost: each ends DONE, FAILED only at the re-drive cap, or PARKED
  (only those left parked); a poison turn ends FAILED at the cap and never runs a
  fifth time; the retained events are seq 1..last_seq, attempts never go back,
  and there is exactly one terminal event, last (none for a parked turn);
- nothing acknowledged is missing: every event an agent (or the prober) had
  acknowledged is still there unchanged unless a published rewind to a later
  attempt dropped it; every acknowledged checkpoint and task write exists; a
  turn acknowledged DONE or FAILED ended so; every event a watcher ever showed
  is there too, or was rewound away; both files pass ``integrity_check``;
- every watcher (the follower, raw WatchTurn streams, the NATS mirror replayed
  with its rewinds) showed no gap, no repeat, nothing after the terminal event,
  and ended with exactly the retained events and one terminal event;
- a step before the last committed checkpoint never ran twice: no node started
  in attempt N at a step that an attempt before N had checkpointed; no tool
  acted twice under one idempotency key;
- a zombie's attempt wrote nothing after the turn was re-driven away from it;
- the store keeps no zombie's memory (decision 317): every store write a node
  had acknowledged is there, or was overwritten by a later attempt of the turn;
  no item holds an attempt older than one acknowledged for its key (a stale
  attempt's write that landed after a newer one's); a DONE turn has its path's
  memory; the write the harness sends in a zombie's name is refused, not kept;
- a cron fires one run per tick and never once per missed tick (decision 331),
  and every ended run with a webhook was delivered, applied once by its key, signed
  (tests/faults/crons.py);
- the outbox drains to zero once NATS is back, and the mirror saw its last row.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from turnkeeper.v1 import turns_pb2

from tests.faults.checks import Checks, covered_by_rewind, digest
from tests.faults.cluster import Cluster
from tests.faults.injectors import Zombie
from tests.faults.storage import Storage
from tests.faults.watchers import TERMINAL, Shape, shape_of
from tests.faults.workload import TurnRun
from tests.support import receiver

MAX_REDRIVES = 3
STATES = {v: k.removeprefix("TURN_STATE_") for k, v in turns_pb2.TurnState.items()}


@dataclass
class Records:
    """The agents' record files (tests/faults/agent.py), read as they grow."""

    directory: Path
    offsets: dict[Path, int] = field(default_factory=dict)
    starts: defaultdict[str, list[tuple[str, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # (attempt, receipt) of each return of step3's effect.
    effects: defaultdict[str, list[tuple[int, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    events: defaultdict[str, dict[tuple[int, int], str]] = field(
        default_factory=lambda: defaultdict(dict)
    )
    ends: defaultdict[str, list[tuple[int, str, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    # (attempt, version label) of each node run.
    versions: defaultdict[str, list[tuple[int, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    checkpoints: list[tuple[str, str]] = field(default_factory=list)
    writes: list[tuple[str, str, str]] = field(default_factory=list)
    # (node, attempt) of each store write acknowledged, and of each refused as stale.
    store_puts: defaultdict[str, list[tuple[str, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    store_refused: defaultdict[str, list[tuple[str, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )

    def read(self) -> None:
        """Take in the complete lines written since the last read."""
        for path in sorted(self.directory.glob("*.log")):
            offset = self.offsets.get(path, 0)
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            complete = data[: data.rfind(b"\n") + 1]
            self.offsets[path] = offset + len(complete)
            for line in complete.decode().splitlines():
                self._line(line.split())

    def _line(self, w: list[str]) -> None:
        match w:
            case ["start", turn, node, step, attempt]:
                self.starts[turn].append((node, int(step), int(attempt)))
            case ["effect", turn, attempt, receipt]:
                self.effects[turn].append((int(attempt), receipt))
            case ["version", turn, attempt, label]:
                self.versions[turn].append((int(attempt), label))
            case ["ackev", turn, attempt, seq, dig]:
                self.events[turn][(int(seq), int(attempt))] = dig
            case ["ackend", turn, attempt, state, last_seq]:
                self.ends[turn].append((int(attempt), state, int(last_seq)))
            case ["ackcp", thread, checkpoint_id]:
                self.checkpoints.append((thread, checkpoint_id))
            case ["ackwr", thread, checkpoint_id, task_id]:
                self.writes.append((thread, checkpoint_id, task_id))
            case ["stput", turn, node, attempt]:
                self.store_puts[turn].append((node, int(attempt)))
            case ["stref", turn, node, attempt]:
                self.store_refused[turn].append((node, int(attempt)))
            case _:
                pass  # "done" lines: for a person reading the record


@dataclass
class Tally:
    done: int = 0
    failed_at_cap: int = 0
    parked: int = 0
    acked_events: int = 0
    acked_checkpoints: int = 0
    acked_writes: int = 0
    zombie_refusals: int = 0
    zombie_turns: int = 0
    # The effect ledger against the receiver (step3's tool).
    effects: int = 0
    effect_executions: int = 0
    effects_from_ledger: int = 0
    effects_retried: int = 0
    effects_superseded: int = 0
    # Turns whose steps ran on more than one graph version (taken across an upgrade).
    across_versions: int = 0
    # The store (the nodes' memory): writes acknowledged and checked, items read,
    # writes of stale attempts refused (by the agents' zombies and in their name).
    store_puts: int = 0
    store_items: int = 0
    store_refused: int = 0
    # Crons and webhooks (tests/faults/crons.py).
    crons: int = 0
    cron_runs: int = 0
    cron_skipped: int = 0
    webhooks: int = 0
    webhook_deliveries: int = 0
    by_kind: Counter[str] = field(default_factory=Counter)
    # (kind, when) of each turn FAILED at the re-drive cap, by the service's clock.
    at_cap: list[tuple[str, float]] = field(default_factory=list)

    def next_to_poison(self) -> tuple[int, int]:
        """(non-poison turns FAILED at the cap, of which in the same second as a
        poison turn: re-driven with it by one startup Redrive, and died with it)."""
        poison = [when for kind, when in self.at_cap if kind == "poison"]
        others = [when for kind, when in self.at_cap if kind != "poison"]
        return len(others), sum(any(abs(w - p) < 1.0 for p in poison) for w in others)


class RoundCheck:
    def __init__(self, cluster: Cluster, checks: Checks, records: Records, tally: Tally) -> None:
        self.c = cluster
        self.checks = checks
        self.records = records
        self.tally = tally
        self.receiver = receiver.ReceiverLog()
        self._checkpoints_done = 0
        self._writes_done = 0

    def expect(self, ok: bool, violation: str) -> bool:
        return self.checks.expect(ok, violation)

    async def all(self, runs: list[TurnRun], zombies: list[Zombie], probe_turn: str) -> None:
        await self.outbox_drains()
        for sound, found in self.c.storage.integrity():
            self.expect(sound, found)
        self.records.read()
        self.receiver = receiver.read(self.c.receiver_log)
        sessions = self.c.storage
        try:
            self.acknowledged_checkpoints(sessions)
            stale: dict[str, int] = {}
            for z in zombies:
                stale.update(z.held)
                refused = sum(" refused (" in line for line in z.agent.lines[z.thawed_at :])
                self.tally.zombie_refusals += refused + z.refused
            for run in runs:
                if not run.created:
                    continue
                try:
                    await self.turn(run, sessions, stale.get(run.turn_id))
                except Exception as exc:  # data no invariant foresaw: a violation too
                    self.expect(False, f"{run.turn_id}: checking it raised {exc!r}")
        finally:
            sessions.close()
        events = await self._events(probe_turn)
        self.mirror(probe_turn, [shape_of(e) for e in events])
        for reused in self.c.mirror.reused:
            self.expect(False, reused)
        self.c.mirror.reused.clear()
        for other in self.c.pool.deaths.other:
            self.expect(False, f"an agent died on its own: {other}")
        self.c.pool.deaths.other.clear()

    async def outbox_drains(self) -> None:
        drained = await self.c.until(lambda: self.c.storage.outbox()[0] == 0, timeout=60)
        waiting, last_id = self.c.storage.outbox()
        self.expect(drained, f"the outbox still holds {waiting} rows with NATS up")
        seen = await self.c.mirror.wait_for(lambda: self.c.mirror.max_id >= last_id, 30)
        self.expect(seen, f"outbox row {last_id} was never delivered (saw {self.c.mirror.max_id})")

    async def _events(self, turn_id: str) -> list[turns_pb2.Event]:
        assert self.c.client is not None
        events: list[turns_pb2.Event] = []
        while True:
            after = events[-1].seq if events else 0
            page = await self.c.client.list_events(
                turns_pb2.ListEventsRequest(turn_id=turn_id, after_seq=after)
            )
            if not page.events:
                return events
            events.extend(page.events)

    def acknowledged_checkpoints(self, sessions: Storage) -> None:
        new_cps = self.records.checkpoints[self._checkpoints_done :]
        self._checkpoints_done = len(self.records.checkpoints)
        for thread, checkpoint_id in new_cps:
            self.expect(
                sessions.checkpoint_exists(thread, checkpoint_id),
                f"acknowledged checkpoint {thread}/{checkpoint_id} missing",
            )
        new_writes = self.records.writes[self._writes_done :]
        self._writes_done = len(self.records.writes)
        for thread, checkpoint_id, task_id in new_writes:
            self.expect(
                sessions.writes_exist(thread, checkpoint_id, task_id),
                f"acknowledged writes {thread}/{checkpoint_id}/{task_id} missing",
            )
        self.tally.acked_checkpoints += len(new_cps)
        self.tally.acked_writes += len(new_writes)

    async def turn(self, run: TurnRun, sessions: Storage, stale: int | None) -> None:
        assert self.c.client is not None
        tid = run.turn_id
        turn = (await self.c.client.get_turn(turns_pb2.GetTurnRequest(turn_id=tid))).turn
        raw = await self._events(tid)
        retained = [shape_of(e) for e in raw]
        state = STATES[turn.state]
        rewinds = self.c.mirror.rewinds(tid)
        self.tally.by_kind[f"{run.kind} {state}"] += 1

        # No turn is lost.
        # The cap counts charged crashes (poison containment): a crash shared by
        # several turns is charged to none of them until the culprit runs alone.
        at_cap = turn.crashes_charged == MAX_REDRIVES and "re-drive cap" in turn.error
        if state == "DONE":
            self.tally.done += 1
            self.expect(run.kind != "poison", f"{tid}: a poison turn ended DONE")
        elif state == "FAILED":
            self.tally.failed_at_cap += at_cap
            if at_cap:
                self.tally.at_cap.append((run.kind, turn.updated_at.ToNanoseconds() / 1e9))
            self.expect(at_cap, f"{tid}: FAILED but not at the re-drive cap: {turn.error!r}")
        elif state == "PARKED":
            self.tally.parked += 1
            self.expect(run.leave_parked, f"{tid}: PARKED, and not a turn left parked")
        else:
            self.expect(False, f"{tid}: {state} at the end of the round (attempts {turn.attempts})")
        if run.kind == "poison":
            self.expect(state == "FAILED" and at_cap, f"{tid}: poison turn ended {state}")
            runs = sum(node == "poison" for node, _, _ in self.records.starts[tid])
            # Alone (charged) at most cap + 1 times, and uncharged at most twice: once
            # as a new suspect, once more before it is held for probation.
            self.expect(runs <= MAX_REDRIVES + 3, f"{tid}: the poison step ran {runs} times")

        # The retained events.
        self.expect(
            [s[0] for s in retained] == list(range(1, turn.last_seq + 1)),
            f"{tid}: retained seqs are not 1..{turn.last_seq}",
        )
        attempts = [s[1] for s in retained]
        self.expect(attempts == sorted(attempts), f"{tid}: an older attempt wrote after a newer")
        terminals = [i for i, s in enumerate(retained) if s[2] in TERMINAL]
        if state in ("DONE", "FAILED"):
            ok = terminals == [len(retained) - 1] and retained[-1][2] == f"turn.{state.lower()}"
            self.expect(ok, f"{tid}: terminal events at {terminals} of {len(retained)}")
        else:
            self.expect(not terminals, f"{tid}: {state} with a terminal event")

        self.content(run, retained, state)
        self.watchers(run, retained, state)
        self.ever_shown(run, retained, rewinds)
        self.mirror(tid, retained)
        self.acknowledged(tid, raw, rewinds, state, turn.last_seq)
        self.steps(tid, sessions)
        await self.effects(run, state)
        if run.memory or stale is not None:
            await self.memory(tid, state, run.kind, remembers=run.memory)
        if stale is not None:
            self.zombie(tid, stale, retained, rewinds)
        self.versions(tid)

    async def memory(self, tid: str, state: str, kind: str, *, remembers: bool = True) -> None:
        """The turn's memory in the store against what the agents were told: nothing
        acknowledged missing, no stale attempt's write over a newer one, nothing
        written in a zombie's name, and (a DONE turn that `remembers`) one item per
        node of its path."""
        items = await self.c.store_items(("faults", tid))
        self.tally.store_items += len(items)
        self.tally.store_refused += len(self.records.store_refused[tid])
        stored = {key: value.get("attempt") for key, value in items.items()}
        self.expect(
            "zombie" not in stored, f"{tid}: the store kept a write made in a zombie's name"
        )
        newest: dict[str, int] = {}
        for node, attempt in self.records.store_puts[tid]:
            self.tally.store_puts += 1
            newest[node] = max(attempt, newest.get(node, attempt))
        ran = {(node, a) for node, _, a in self.records.starts[tid]}
        for node, attempt in newest.items():
            kept = stored.get(node)
            self.expect(
                isinstance(kept, int) and kept >= attempt,
                f"{tid}: the store holds {node}'s memory of attempt {kept}, attempt {attempt} "
                "had been acknowledged its write (a stale attempt wrote over it, or it is lost)",
            )
        for node, held in stored.items():
            if node == "zombie":
                continue
            self.expect(
                (node, held) in ran,
                f"{tid}: the store holds {node}'s memory of attempt {held}, which never ran it",
            )
        if state == "DONE" and remembers:
            path = {"fanout": ["step1", "left", "right", "step3", "step4"]}.get(
                kind, ["step1", "step2", "step3", "step4"]
            )
            missing = sorted(set(path) - set(stored))
            self.expect(not missing, f"{tid}: DONE without the memory of {missing}")

    def versions(self, tid: str) -> None:
        """Under `pin` a turn's steps all ran on one graph version; under the others it
        may move to a version the policy allows (counted)."""
        labels = sorted({label for _, label in self.records.versions[tid]})
        self.tally.across_versions += len(labels) > 1
        if self.c.version_policy == "pin":
            self.expect(len(labels) <= 1, f"{tid}: ran on versions {labels} under pin")

    async def effects(self, run: TurnRun, state: str) -> None:
        """Exactly-once effects (docs/effects.md), against what the receiver saw: no
        effect whose outcome was recorded is executed again by a later attempt; no
        logical call is applied under two keys; every return of the effect in the
        turn is the receipt of the one application; a DONE turn past step3 applied
        its entry once."""
        assert self.c.client is not None
        tid = run.turn_id
        listed = await self.c.client.list_effects(turns_pb2.ListEffectsRequest(turn_id=tid))
        seen = self.receiver
        for row in listed.effects:
            self.tally.effects += 1
            executions = seen.executions.get(row.key, [])
            self.tally.effect_executions += len(executions)
            self.tally.effects_retried += max(len(executions) - 1, 0)
            if row.state == turns_pb2.EFFECT_STATE_SUPERSEDED:
                self.tally.effects_superseded += 1
            if row.state == turns_pb2.EFFECT_STATE_DONE:
                again = [a for _, a, _ in executions if a > row.attempt]
                self.expect(
                    not again,
                    f"{tid}: effect {row.key} executed again in attempt(s) {again} after "
                    f"attempt {row.attempt} recorded its outcome",
                )
                self.tally.effects_from_ledger += sum(
                    a > row.attempt for a, _ in self.records.effects[tid]
                )
        applied = {entry: keys for (turn, entry), keys in seen.applied.items() if turn == tid}
        for entry, keys in applied.items():
            self.expect(len(keys) == 1, f"{tid}: {entry} applied under {len(keys)} keys: {keys}")
        receipts = {receipt for _, receipt in self.records.effects[tid]}
        self.expect(len(receipts) <= 1, f"{tid}: step3's effect returned {sorted(receipts)}")
        passed_step3 = any(node == "step3" for node, _, _ in self.records.starts[tid])
        if state == "DONE" and passed_step3:
            done = [e for e in listed.effects if e.state == turns_pb2.EFFECT_STATE_DONE]
            self.expect(
                len(done) == 1 and applied.get("step3") == [done[0].key],
                f"{tid}: DONE with effects {[(e.key, e.state) for e in listed.effects]}, "
                f"applied {applied}",
            )

    def content(self, run: TurnRun, retained: list[Shape], state: str) -> None:
        """The retained events are those of an uninterrupted run: each node that
        finished has its whole text, its tool call and its step event, once."""
        tid = run.turn_id
        data = [(type_, json.loads(d)) for _, _, type_, d in retained]
        steps = [d["node"] for t, d in data if t == "step"]
        self.expect(len(steps) == len(set(steps)), f"{tid}: a step event twice: {steps}")
        for node in set(steps) - {"approve"}:
            text = "".join(d["text"] for t, d in data if t == "token" and d["node"] == node)
            whole = f"{node} of {tid} begins{node} of {tid} ends"
            self.expect(text == whole, f"{tid}: {node} finished but says {text!r}")
            tools = [t for t, d in data if t.startswith("tool_call") and d["node"] == node]
            want = ["tool_call_start", "tool_call_end"] if node == "step3" else []
            self.expect(tools == want, f"{tid}: {node} has tool events {tools}")
        if state == "DONE":
            path = {
                "plain": ["step1", "step2", "step3", "step4"],
                "fanout": ["step1", "left", "right", "step3", "step4"],
                "approval": ["step1", "approve", "step2", "step3", "step4"],
            }[run.kind]
            if run.kind == "fanout":
                steps[1:3] = sorted(steps[1:3])
            self.expect(steps == path, f"{tid}: DONE after the steps {steps}")
            types = [t for t, _ in data]
            self.expect(types[-2:] == ["final", "turn.done"], f"{tid}: ends with {types[-2:]}")

    def watchers(self, run: TurnRun, retained: list[Shape], state: str) -> None:
        tid = run.turn_id
        followed = run.followed
        if followed is not None:
            for problem in followed.shown.problems:
                self.expect(False, problem)
            shown = followed.shown.events
            self.expect(shown == retained, f"{tid}: the follower's transcript is not the turn's")
            content = [(e.seq, e.type, e.data) for e in followed.transcript.events]
            self.expect(len(content) == len(shown), f"{tid}: the Transcript and the frames differ")
            want = 0 if state == "PARKED" else 1
            self.expect(
                followed.shown.terminals() == want,
                f"{tid}: the follower shows {followed.shown.terminals()} terminal events",
            )
        for raw in run.raws:
            for problem in raw.shown.problems:
                self.expect(False, problem)
            if raw.ended and raw.shown.terminal:
                tail = retained if raw.shown.resets else retained[raw.after_seq :]
                self.expect(raw.shown.events == tail, f"{raw.shown.name}: not the turn's events")
            elif raw.ended:
                joined_late = state in ("DONE", "FAILED") and raw.after_seq >= len(retained)
                self.expect(
                    joined_late and not raw.shown.events,
                    f"{raw.shown.name}: the stream ended without a terminal event",
                )

    def ever_shown(
        self, run: TurnRun, retained: list[Shape], rewinds: list[tuple[int, int]]
    ) -> None:
        shown: set[Shape] = set()
        for w in [run.followed, *run.raws]:
            if w is not None:
                shown |= w.shown.ever
        for shape in sorted(shown):
            seq, attempt = shape[0], shape[1]
            kept = seq <= len(retained) and retained[seq - 1] == shape
            self.expect(
                kept or covered_by_rewind(rewinds, seq, attempt),
                f"{run.turn_id}: event seq {seq} (attempt {attempt}) was shown, then lost",
            )

    def mirror(self, tid: str, retained: list[Shape]) -> None:
        replayed, problems = self.c.mirror.replay(tid)
        for problem in problems:
            self.expect(False, f"{tid} on NATS: {problem}")
        if problems:  # what arrived, in order, for the person looking into it
            lines = [
                f"{msg_id} {kind} seq={p['seq']} attempt={p['attempt']} {p.get('type', '')}"
                for kind, p, msg_id in self.c.mirror.by_turn.get(tid, [])
            ]
            (self.c.logs / f"nats-{tid}.log").write_text("\n".join(lines) + "\n")
        self.expect(replayed == retained, f"{tid}: NATS replayed is not the retained events")

    def acknowledged(
        self,
        tid: str,
        raw: list[turns_pb2.Event],
        rewinds: list[tuple[int, int]],
        state: str,
        last_seq: int,
    ) -> None:
        by_seq = {e.seq: e for e in raw}
        acked = self.records.events[tid]
        for (seq, attempt), dig in acked.items():
            e = by_seq.get(seq)
            if e is not None and e.attempt == attempt:
                self.expect(
                    digest(e.type, e.data_json) == dig, f"{tid}: acknowledged seq {seq} changed"
                )
            else:
                self.expect(
                    covered_by_rewind(rewinds, seq, attempt),
                    f"{tid}: acknowledged event seq {seq} (attempt {attempt}) is lost",
                )
        self.tally.acked_events += len(acked)
        for attempt, acked_state, acked_last in self.records.ends[tid]:
            if acked_state == "PARKED" and state != "PARKED":
                continue  # resumed since
            self.expect(
                (state, last_seq) == (acked_state, acked_last),
                f"{tid}: attempt {attempt} was acknowledged {acked_state} at seq {acked_last}, "
                f"the turn is {state} at {last_seq}",
            )

    def steps(self, tid: str, sessions: Storage) -> None:
        committed: list[tuple[int, int]] = []
        for checkpoint_id, attempt, metadata in sessions.boundaries(tid):
            if self.expect(metadata is not None, f"{tid}: boundary {checkpoint_id} lacks its row"):
                assert metadata is not None
                step = metadata.get("step")
                if self.expect(
                    isinstance(step, int), f"{tid}: checkpoint {checkpoint_id} has no step"
                ) and isinstance(step, int):
                    committed.append((int(attempt), step))
        starts = self.records.starts[tid]
        # A node whose step an attempt checkpointed: it must not start again later.
        durable: dict[str, int] = {}
        for node, s, a in starts:
            if (a, s) in committed:
                durable[node] = min(a, durable.get(node, a))
        for node, step, attempt in starts:
            earlier = [s for a, s in committed if a < attempt]
            self.expect(
                not earlier or step > max(earlier),
                f"{tid}: {node} (step {step}) ran in attempt {attempt} although an earlier "
                f"attempt had committed the checkpoint of step {max(earlier or [0])}",
            )
            self.expect(
                durable.get(node, attempt) >= attempt,
                f"{tid}: {node} ran again in attempt {attempt} although attempt "
                f"{durable.get(node)} had committed its step",
            )

    def zombie(
        self, tid: str, stale: int, retained: list[Shape], rewinds: list[tuple[int, int]]
    ) -> None:
        away = [seq for seq, attempt in rewinds if attempt > stale]
        if not away:
            return  # it finished or parked before its lease lapsed: not a zombie
        self.tally.zombie_turns += 1
        late = [s[0] for s in retained if s[1] == stale and s[0] > away[0]]
        self.expect(not late, f"{tid}: the zombie's attempt {stale} wrote seqs {late}")
