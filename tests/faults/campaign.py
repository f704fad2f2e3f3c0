"""A fault campaign: rounds of turns through the real cluster with faults
injected, and the invariants (tests/faults/invariants.py) checked after each.

A round keeps ``concurrency`` turns in flight until its faults are all injected
(and at least ``turns`` turns were sent), lets every turn end, then checks. The
campaign runs rounds until it reached ``target_kills`` agent SIGKILLs (and
``min_rounds``), so the count in the report is what happened, not what was hoped.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from turnkeeper.v1 import turns_pb2

from tests.faults.checks import Checks
from tests.faults.cluster import Cluster
from tests.faults.crons import Crons
from tests.faults.injectors import BIG_FAULTS, POSTGRES_FAULTS, Counts, Injector
from tests.faults.invariants import Records, RoundCheck, Tally
from tests.faults.overload import CpuHogs, Redrive, causes
from tests.faults.prober import Prober
from tests.faults.workload import TurnRun, Workload

T = TypeVar("T")


@dataclass(frozen=True)
class Plan:
    name: str
    min_rounds: int
    max_rounds: int
    target_kills: int
    turns: int
    max_turns: int
    concurrency: int
    kills_per_round: int
    kill_gap: tuple[float, float]
    # Share of killed replicas that stay down until their lease lapsed.
    late_share: float
    poison_per_round: int
    big_faults: tuple[str, ...]
    big_gap: tuple[float, float]
    replicas: int = 3
    lease_seconds: float = 3.0
    step_seconds: float = 0.25
    turn_deadline: float = 90.0
    # The agent's version policy (docs/versions.md); empty: the service's default.
    version_policy: str = ""
    # CPU hogs per core for the whole campaign (tests/faults/overload.py); 0: none.
    hogs_per_core: int = 0
    # A cron each round (tests/faults/crons.py), every `cron_period` seconds with a
    # webhook, for `cron_ticks` ticks (0: the whole round); cron_period 0: none.
    cron_period: int = 0
    cron_ticks: int = 0
    # The share of turns whose nodes keep a memory in the store.
    memory_share: float = 0.0


# Part of every `pytest` run: each kind of fault once, in about a minute. One round
# (decision 326): a round injects every kind; rounds after the first only repeat them
# on a cluster that went through them, which FULL's 12 and more rounds do.
CI = Plan(
    name="ci",
    min_rounds=1,
    max_rounds=1,
    target_kills=5,
    turns=12,
    max_turns=40,
    concurrency=5,
    kills_per_round=5,
    kill_gap=(0.3, 1.5),
    late_share=0.2,
    poison_per_round=1,
    big_faults=BIG_FAULTS,
    big_gap=(0.2, 1.0),
    # A few runs of a cron, each with a webhook, and a few turns with a memory.
    cron_period=2,
    cron_ticks=4,
    memory_share=0.25,
)

# `python -m tests.faults --full`: at least 200 agent SIGKILLs.
FULL = Plan(
    name="full",
    min_rounds=12,
    max_rounds=40,
    target_kills=200,
    turns=30,
    max_turns=120,
    concurrency=6,
    kills_per_round=14,
    kill_gap=(0.3, 2.5),
    late_share=0.25,
    poison_per_round=2,
    big_faults=BIG_FAULTS,
    big_gap=(0.5, 3.0),
    cron_period=2,
    cron_ticks=0,
    memory_share=0.5,
)


# The campaign's turns, no fault injected, on a machine oversubscribed by CPU hogs at
# twice its core count (issue 51): no agent dies, so no turn may be re-driven or fail.
# Part of every `pytest` run, kept short: one round.
OVERLOAD = Plan(
    name="overload",
    min_rounds=1,
    max_rounds=1,
    target_kills=0,
    turns=8,
    max_turns=8,
    concurrency=4,
    kills_per_round=0,
    kill_gap=(0.0, 0.0),
    late_share=0.0,
    poison_per_round=0,
    big_faults=(),
    big_gap=(0.0, 0.0),
    replicas=2,
    hogs_per_core=2,
)

# `pytest --full tests/faults/test_overload.py`, and `python -m tests.faults --overload`.
OVERLOAD_FULL = dataclasses.replace(
    OVERLOAD,
    name="overload-full",
    min_rounds=4,
    max_rounds=4,
    turns=30,
    max_turns=30,
    concurrency=6,
    replicas=3,
)


@dataclass
class Result:
    plan: Plan
    seed: int
    rounds: int = 0
    turns: int = 0
    seconds: float = 0.0
    counts: Counts = field(default_factory=Counts)
    tally: Tally = field(default_factory=Tally)
    checks: Checks = field(default_factory=Checks)
    poison_kills: int = 0
    agent_processes: int = 0
    prober_events: int = 0
    prober_checkpoints: int = 0
    storage_refusals: int = 0
    nats_duplicates: int = 0
    turn_seconds: list[float] = field(default_factory=list)
    # Every turn run more than once, with the causes the logs give.
    redrives: list[Redrive] = field(default_factory=list)

    @property
    def violations(self) -> list[str]:
        return self.checks.violations


def on_backend(plan: Plan, backend: str) -> Plan:
    """The plan for a backend: on PostgreSQL a PostgreSQL restart takes the full
    disk's place (the service writes no files of its own there)."""
    if backend == "sqlite":
        return plan
    faults = tuple("restart_postgres" if f == "disk_full" else f for f in plan.big_faults)
    assert set(faults) <= set(POSTGRES_FAULTS)
    return dataclasses.replace(plan, name=f"{plan.name}-{backend}", big_faults=faults)


class Campaign:
    def __init__(self, plan: Plan, seed: int, workdir: Path, backend: str = "sqlite") -> None:
        plan = on_backend(plan, backend)
        self.backend = backend
        self.plan = plan
        self.seed = seed
        self.workdir = workdir
        self.result = Result(plan, seed)
        self.cluster = Cluster(
            workdir,
            replicas=plan.replicas,
            lease_seconds=plan.lease_seconds,
            step_seconds=plan.step_seconds,
            backend=backend,
            version_policy=plan.version_policy,
        )
        r = self.result
        self.prober = Prober(self.cluster, r.checks, seed)
        self.injector = Injector(self.cluster, r.checks, self.prober, r.counts, seed)
        self.workload = Workload(
            self.cluster,
            r.checks,
            seed=seed,
            deadline=plan.turn_deadline,
            patience=30.0,
            memory_share=plan.memory_share,
        )
        self.records = Records(self.cluster.records)
        self.check = RoundCheck(self.cluster, r.checks, self.records, r.tally)
        self.crons = Crons(
            self.cluster, r.checks, r.tally, period=plan.cron_period, ticks=plan.cron_ticks
        )

    def log(self, message: str) -> None:
        print(f"[faults {time.strftime('%H:%M:%S')}] {message}", flush=True)

    async def run(self) -> Result:
        plan, r = self.plan, self.result
        self.log(f"plan {plan.name}, seed {self.seed} (TURNKEEPER_FAULTS_SEED={self.seed})")
        await self._rounds()
        self._explain_redrives()
        self.log(
            f"done: {r.rounds} rounds, {r.turns} turns, {r.counts.agent_kills} agent kills, "
            f"{r.checks.count} checks, {len(r.violations)} violations, "
            f"{len(r.redrives)} turns re-driven, {r.seconds:.0f}s"
        )
        return r

    async def _rounds(self) -> None:
        plan, r = self.plan, self.result
        started = time.monotonic()
        await self.cluster.start()
        # From the first round to the last (the cluster's start is not what is tried).
        hogs = CpuHogs(plan.hogs_per_core)
        if hogs.count:
            self.log(f"{hogs.count} CPU hogs from now to the end of the last round")
        try:
            with hogs:
                while r.rounds < plan.max_rounds and (
                    r.rounds < plan.min_rounds or r.counts.agent_kills < plan.target_kills
                ):
                    await self.round(r.rounds)
                    r.rounds += 1
        finally:
            await self.cluster.close()
            (self.cluster.logs / "faults.log").write_text("\n".join(r.counts.timeline) + "\n")
            r.seconds = time.monotonic() - started
            r.poison_kills = self.cluster.pool.deaths.poison
            r.agent_processes = self.cluster.pool.processes
            r.prober_events = self.prober.events_checked
            r.prober_checkpoints = self.prober.checkpoints_checked
            r.nats_duplicates = self.cluster.mirror.duplicates

    def _explain_redrives(self) -> None:
        """Each re-driven turn's causes, from the service's and the agents' logs."""
        lines: list[str] = []
        for path in sorted(self.cluster.logs.glob("*.log")):
            lines += path.read_text(errors="replace").splitlines()
        for redrive in self.result.redrives:
            redrive.causes = causes(redrive.turn_id, lines)

    async def _redriven(self, runs: list[TurnRun]) -> None:
        """The round's turns that ran more than once (attempts > 0)."""
        client = self.cluster.client
        assert client is not None
        for run in runs:
            if not run.created:
                continue
            turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=run.turn_id))).turn
            if turn.attempts > 0:
                self.result.redrives.append(Redrive(run.turn_id, turn.attempts))

    async def round(self, round_: int) -> None:
        plan, r = self.plan, self.result
        self.injector.mark(f"round {round_}")
        self.log(f"round {round_}: {plan.big_faults} and {plan.kills_per_round} agent kills")
        faults_done = asyncio.Event()
        stop_probe = asyncio.Event()
        zombies_before = len(r.counts.zombies)
        # The round's cron, made before its faults strike.
        cron = await self.crons.start(round_) if plan.cron_period else None

        async def faults() -> None:
            try:
                await asyncio.gather(
                    self.injector.kill_agents(
                        round_, plan.kills_per_round, plan.kill_gap, plan.late_share
                    ),
                    self.injector.big_faults(round_, list(plan.big_faults), plan.big_gap),
                )
            finally:
                faults_done.set()

        probing = asyncio.create_task(self.prober.run(round_, stop_probe))
        injecting = asyncio.create_task(faults())
        working = asyncio.create_task(
            self.workload.run(
                round_,
                at_least=plan.turns,
                at_most=plan.max_turns,
                concurrency=plan.concurrency,
                poison=plan.poison_per_round,
                faults_done=faults_done,
            )
        )
        try:
            # A fault that failed to strike or to be undone (NATS not started again)
            # ends the campaign now, with its error: the turns would otherwise wait
            # for ever on a cluster that is not coming back.
            runs = await alongside(working, injecting)
        finally:
            stop_probe.set()
            for task in (working, injecting):
                if not task.done():
                    task.cancel()
            if cron is not None:
                await self.crons.stop(cron)
        probe = await probing
        await self.prober.finish(probe)
        await self.cluster.pool.all_up(timeout=60)
        await self.prober.verify(probe)
        r.storage_refusals += self.prober.verify_windows()
        await self.check.all(runs, r.counts.zombies[zombies_before:], probe.turn_id)
        if cron is not None:
            await self.crons.check(cron, self.check)
        await self._redriven(runs)
        r.turns += sum(run.created for run in runs)
        r.turn_seconds += [run.ended_at - run.started_at for run in runs if run.ended_at]
        self.log(
            f"round {round_}: {len(runs)} turns; totals: {r.counts.agent_kills} agent kills, "
            f"{r.checks.count} checks, {len(r.violations)} violations"
        )


async def alongside(main: asyncio.Task[T], side: asyncio.Task[None]) -> T:
    """Both tasks' ends, ``main``'s result: but should ``side`` fail first, ``main`` is
    cancelled and ``side``'s error raised without waiting for ``main`` to end."""
    await asyncio.wait({main, side}, return_when=asyncio.FIRST_EXCEPTION)
    if side.done() and not main.done():  # only a failure returns before both end
        main.cancel()
        await asyncio.gather(main, return_exceptions=True)
        await side
    result = await main
    await side
    return result


def commit() -> str:
    """The code the campaign ran: $TURNKEEPER_FAULTS_COMMIT (a copy of a tree has
    no .git), else git's HEAD, marked when the tree had changes."""
    if os.environ.get("TURNKEEPER_FAULTS_COMMIT"):
        return os.environ["TURNKEEPER_FAULTS_COMMIT"]
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{head}{' with local changes' if dirty else ''}"


def machine() -> str:
    cores = os.cpu_count() or 0
    try:
        with open("/proc/meminfo") as f:
            kib = int(f.readline().split()[1])
        memory = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        memory = "unknown memory"
    return f"{cores} cores, {memory}, {platform.system()} {platform.release()}"


# What the page says of the campaigns whatever run it reports: what they inject, what
# they check, how to run them. Kept in the report, whoever regenerates it.
ABOUT = """\
`tests/faults/` runs turns through a real cluster (a nats-server, the service as a
subprocess, agent replicas hosting the bridge as subprocesses) while it kills and
breaks its parts, and checks invariants after every round. A round keeps turns in
flight (plain, fan-out, approval turns that park and are resumed or left parked,
poison turns that kill their agent, a share of them keeping a memory in the store)
until its faults are all injected, lets every turn end, then checks; a cron with a
webhook fires among the faults. The campaign runs rounds until it reached its count
of agent SIGKILLs (tests/faults/campaign.py: the plans CI, FULL, OVERLOAD and
OVERLOAD_FULL).

## What the campaign injects

tests/faults/injectors.py says how each fault is made. The seed fixes the plan (turn
kinds, kill gaps, which faults in which order, how long each lasts), not where a kill
lands in a turn: that is up to the processes' timing.

- **Agent SIGKILL** of a random live replica after a random gap; it restarts at once
  (its startup Redrive takes its turns back) or only after its lease lapsed (the
  reaper hands its turns to the other replicas over NATS).
- **Poison turns**: a turn whose step kills its agent each time it runs, until the
  re-drive cap fails it (decision 112).
- **Service SIGKILL under load**, restarted on the same port and data; on PostgreSQL
  one replica of two, the clients carrying on through the other.
- **NATS stopped or SIGKILLed**, restarted on the same port. The restart holds the
  service's next PING (an outbox batch's or a notice's flush) and cuts once it holds
  one, so a flush is caught in flight (decision 502).
- **A zombie executor**: a replica frozen (SIGSTOP) until one of its turns was
  re-driven away, then thawed; it carries on writing and must be refused, and the
  harness sends every kind of write in its name too (a store write among them).
- **A disk that refuses writes**: the service's RLIMIT_FSIZE lowered to 1 byte, so
  every write to its SQLite files fails with EFBIG, then raised again without a
  restart. On PostgreSQL a PostgreSQL restart (a fast shutdown that cuts every
  connection mid-transaction) takes its place.
- **A rolling upgrade**: every replica replaced, one by one, with a new graph version
  (policy compatible; `pin` in the `sqlite-pin` variant).
- **Overload** (tests/faults/overload.py), a campaign of its own: no fault, the
  campaign's turns first on a quiet machine, then with CPU hogs at twice the core
  count from the first round to the last.

## What the campaign checks

Every check goes through `Checks.expect` (tests/faults/checks.py), which counts it and
keeps what a person needs to look into a violation; a run with any violation fails and
prints its seed, and on a violation about NATS the tail of nats-server's own log and
of the service's NATS link. tests/faults/invariants.py and tests/faults/crons.py have
them word for word; after every round:

- **No turn is lost**: each ends DONE, FAILED only at the re-drive cap, or PARKED
  (only those left parked); a poison turn ends FAILED at the cap; the retained events
  are seq 1..last_seq, attempts never go back, one terminal event, last.
- **Nothing acknowledged is missing**: every event, checkpoint and task write an agent
  (its record lines, tests/faults/agent.py) or the prober was told is stored exists,
  unless a published rewind to a later attempt dropped it; a put the bridge put off
  counts once its answer was checked (decision 553); `integrity_check` passes.
- **Every watcher** (the follower, raw WatchTurn streams, the NATS mirror replayed with
  its rewinds) showed no gap, no repeat, nothing after the terminal event, and ended
  with exactly the retained events.
- **No step before the last committed checkpoint ran twice**; no tool acted twice
  under one idempotency key; step3's effect, through the effect ledger, was applied
  once at its receiver.
- **A zombie's attempt wrote nothing** after the turn was re-driven away from it, and
  the store keeps no zombie's memory (decision 317).
- **A cron fires one run per tick**, never once per missed tick (decision 331), and
  each ended run's webhook was applied once by its key.
- **The outbox drains to zero** once NATS is back, and the mirror saw its last row.
- Under a version pin, no turn ran on two versions; under overload, no turn failed
  and none was re-driven (each re-drive is listed with the log lines that caused it).

## How to run it

| campaign | command | size |
|---|---|---|
| reduced, SQLite (part of every `pytest`) | `pytest tests/faults/test_faults.py` | one round: each fault once, at least 5 agent SIGKILLs, about a minute |
| reduced, with its variants (PostgreSQL, one shared checkpoint stream, version pin) | `pytest --full tests/faults/test_faults.py` | one round each |
| reduced overload (part of every `pytest`) | `pytest tests/faults/test_overload.py` | one round of 8 turns, 2 replicas, 2 hogs a core |
| full overload | `pytest --full tests/faults/test_overload.py`; `python -m tests.faults --overload --full` runs it quiet, then loaded, and writes "Under overload" | 4 rounds of 30 turns, 3 replicas |
| full, SQLite | `python -m tests.faults --full` (writes this page's run and findings) | at least 200 agent SIGKILLs, 12 to 40 rounds |
| full, PostgreSQL | `python -m tests.faults --full --backend postgres` (writes "On PostgreSQL") | the same, two service replicas on one database |

`python -m tests.faults` without `--full` runs the reduced plan and writes nothing.
A pytest campaign prints its seed; `TURNKEEPER_FAULTS_SEED=N` runs the same plan
again, as `--seed N` does for the command.
"""

# What the campaigns found: kept in the report, whoever regenerates it.
FINDINGS = """\
Each fixed with a test that reproduces it:

- **A gap on NATS after a NATS restart: the outbox deleted rows the server never
  read** (commits 26aa58d, 76732f8). nats-py's `flush()` writes its PING straight to
  the socket, ahead of the publishes waiting in its pending buffer, so the PONG came
  back before the server had read the batch; when the connection died right then,
  the rows were deleted and their messages were lost for every subscriber (the
  mirror saw a turn's seq 55 never arrive while 56 and on did). The batch's frames
  now go straight onto the socket, ahead of the PING. (The first fix, forcing
  nats-py's pending buffer out, could wait forever: the next full run caught the
  publisher hung for two minutes with NATS up.) `tests/service/outbox/test_outbox_flush_order.py`
  reproduces it.
- **StartTurn was not idempotent across a service restart** (commit 1f2c1cb). A
  `responses/create` journaled just before the service was SIGKILLed, sent again with
  the same `turn_id` after the restart, was refused ALREADY_EXISTS: the request hash
  covered the input as JSON in the protobuf Struct's map order, which differs from
  one process to the next (upb). Keys are sorted now.
  `tests/service/process/test_service_crash.py::test_start_turn_stays_idempotent_after_a_restart`.
- **WatchTurn never ended for a watcher that joined a finished turn after its last
  seq** (commit 58647e9): no frame and an open stream forever, holding one of the
  client's watch-stream slots. It ends at once now.
  `tests/service/turns/test_rewind_watch.py::test_watch_after_the_terminal_event_of_an_ended_turn_ends_at_once`.
- **A cron made with a token never fired** (decision 413): the scheduler looked its
  maker's token up by name in the tokens table, which is keyed by the tokens' hashes,
  so in a deployment with a tokens file every tick (and every run started later) was
  refused, "not in the tokens file". The campaign's first round with a cron had no
  run of it. The token is found by its name now.
  `tests/langgraph_api/test_sdk_crons_rights.py::test_a_cron_made_with_a_token_fires_under_that_token`.
- **The outbox stopped draining after a NATS restart, NATS up** (decisions 500 to
  504): a batch whose flush was waiting when the restart cut its connection failed at
  its two-second timeout, after the link had reconnected, and its failure dropped the
  new connection just as the publisher started its next batch on it; that one
  failed the same way, and so on while turns wrote ("the outbox still holds 30 rows
  with NATS up", about one reduced run in three on a busy machine). Each connection
  has its own lost signal now, and a flush on a dropped connection fails at once
  (500); a flush that timed out drops its connection rather than trusting it again,
  as nats-py's reader may have ended on the late PONG (501); the campaign keeps
  nats-server's log, shows its tail on a violation, and restarts NATS with a flush
  held in flight, the case that stopped the outbox (502); the link logs why NATS
  closed a connection (503); and a message over `max_payload`, its headers counted,
  is refused before it is sent instead of closing every connection it went out on
  (504). `tests/service/outbox/test_outbox_nats_restart.py` reproduces them with a
  real nats-server restarted behind the relay.
- **A put the bridge put off was counted as acknowledged before its answer** (decision
  553), a false alarm of the campaign's own: since decision 530 a turn's input
  checkpoint rides its first step's frame and returns before its answer, and a kill
  in between loses it by design (the turn is re-driven from its journaled input). The
  first merged run reported two such checkpoints "missing". The campaign's agent now
  notes such a put once its answer was checked; what the invariant checks is
  unchanged.

- **Twenty-five times the NATS copies on PostgreSQL after decision 801** (decision
  802). The first full PostgreSQL run on the outbox published from memory counted
  2,204 copies dropped by `Nats-Msg-Id`, against 88 before it: a replica that fell
  back to the table after NATS came back took every replica's fresh rows, which
  their own replicas were publishing from memory. No watcher kept one (the mirror
  and JetStream drop them by id), but each was a message sent twice. A fall-back
  now looks for the ids its memory lost; the run recorded above counts 63.
  `tests/service/outbox/test_outbox_from_memory.py`.
- **The full campaign hung, the harness's own doing.** `python -m tests.faults`
  does not pass through tests/conftest.py, which turns gRPC's fork handlers off
  before gRPC is imported: a nats-server or `pg_ctl` the harness started again could
  die before its exec, and the round's turns then waited for ever on a NATS that
  was not coming back, the restart's error held in a task nobody awaited. The
  command now imports tests/support/forking.py as pytest does, and a fault that
  fails ends the campaign with its error (`tests/faults/test_harness_faults_fail.py`).

Found beside the campaign in the same round, under load, and in the path of its
approval turns: **a resume handed out while the parked attempt was still ending was
dropped** (decision 560). The hand-off named the attempt that had just parked, the
bridge took it for "this attempt runs here already", and the turn waited, RUNNING and
unowned, for the reaper's next re-offer (5 s), outside the hand-off's trace. The
bridge now waits for the settling attempt's task to end and then claims, inside the
hand-off's span; the TypeScript runner had the same race and the same fix.
`tests/bridge/test_bridge_admission.py::test_a_resume_handed_out_while_the_parked_attempt_ends_is_claimed_after_it`.

Poison containment (decision 112): a crash is charged only
to a turn that can be blamed for it, the only turn its process ran or the one on
probation. Turns that shared a replica with a poison turn are re-run uncharged, then
held and run one at a time, so they are not taken down with it (the "non-poison
turns FAILED at the cap" row counts what is left: turns the campaign itself killed
while they ran alone), while every poison turn ends FAILED after exactly the cap of
charged crashes.
"""

RUN_SECTION = "\n## The last full run on SQLite\n"
FINDINGS_SECTION = "\n## What the campaigns found\n"


def report(result: Result, command: str) -> str:
    """docs/reliability.md up to its PostgreSQL section: what the campaigns do, this
    run, what they found."""
    return (
        f"# Reliability: the fault-injection campaign\n\n{ABOUT}{RUN_SECTION}\n"
        f"{run_section(result, command)}\n{FINDINGS_SECTION}\n{FINDINGS}"
    )


def run_section(result: Result, command: str) -> str:
    """How one full run was made, and its table."""
    r, c, t = result, result.counts, result.tally
    secs = sorted(r.turn_seconds)
    p50 = statistics.median(secs) if secs else 0.0
    p95 = secs[int(0.95 * (len(secs) - 1))] if secs else 0.0
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(t.by_kind.items()))
    collateral, with_poison = t.next_to_poison()
    lines = [
        "```",
        command,
        "```",
        "",
        f"Run on {time.strftime('%Y-%m-%d')}, commit {commit()}, {machine()}.",
        "",
        "| | |",
        "|---|---|",
        f"| seed | {r.seed} |",
        f"| store | {r.plan.name.partition('-')[2] or 'sqlite'} |",
        f"| duration | {r.seconds / 60:.1f} min, {r.rounds} rounds |",
        f"| agent SIGKILLs at random points | **{c.agent_kills}** "
        f"({c.late_restarts} left down until their lease lapsed) |",
        f"| agent deaths by poison turns | {r.poison_kills} |",
        f"| agent processes started | {r.agent_processes} |",
        f"| service SIGKILLs under load (on PostgreSQL: one replica of two) | {c.service_kills} |",
        f"| NATS stopped or SIGKILLed, then restarted | {c.nats_restarts} |",
        f"| rolling upgrades (every replica replaced, one by one, with a new graph "
        f"version; policy {r.plan.version_policy or 'compatible'}) | {c.upgrades}: "
        f"{t.across_versions} turns continued on a newer version |",
        f"| zombie executors (frozen, re-driven away, thawed) | {len(c.zombies)}: "
        f"{t.zombie_turns} turns taken from them, {t.zombie_refusals} of their writes refused |",
        f"| disk refusing writes (RLIMIT_FSIZE; on PostgreSQL: PostgreSQL restarted) | "
        f"{c.disk_windows} times: "
        f"{r.storage_refusals} writes refused with UNAVAILABLE, no acknowledged write lost |",
        f"| turns | **{r.turns}**: {t.done} DONE, {t.failed_at_cap} FAILED at the re-drive cap, "
        f"{t.parked} PARKED |",
        f"| turns by kind and end | {kinds} |",
        f"| non-poison turns FAILED at the cap | {collateral}, {with_poison} of them together "
        "with a poison turn (see below) |",
        f"| turn duration under faults | median {p50:.1f} s, p95 {p95:.1f} s |",
        f"| acknowledged events checked | {t.acked_events} from agents, "
        f"{r.prober_events} from the prober |",
        f"| acknowledged checkpoints checked | {t.acked_checkpoints} from agents "
        f"(and {t.acked_writes} task writes), {r.prober_checkpoints} from the prober |",
        f"| effects (step3's tool, through the effect ledger to the receiver) | "
        f"{t.effects} recorded, {t.effect_executions} executions at the receiver, "
        f"{t.effects_from_ledger} outcomes returned from the ledger without a call, "
        f"{t.effects_retried} uncertain calls made again with their key (applied once), "
        f"{t.effects_superseded} superseded |",
        f"| crons (a tick every {r.plan.cron_period} s, a webhook on each run) | "
        f"{t.crons}: {t.cron_runs} runs, one per tick fired, none twice; {t.cron_skipped} "
        "ticks skipped by the catch-up rule |",
        f"| webhooks (to a receiver that applies each key once) | {t.webhooks} ended runs "
        f"delivered, each applied once, in {t.webhook_deliveries} deliveries |",
        f"| store writes inside nodes (fenced by the turn's attempt) | {t.store_puts} "
        f"acknowledged, each found or overwritten by a later attempt; {t.store_items} items "
        f"checked; {t.store_refused} writes of stale attempts refused |",
        f"| NATS copies dropped as duplicates (same Nats-Msg-Id) | {r.nats_duplicates} |",
        f"| invariant checks | **{r.checks.count}** |",
        f"| violations | **{len(r.violations)}** |",
    ]
    if r.violations:
        lines += ["", "Violations:", "", "```", r.checks.summary(), "```"]
    return "\n".join(lines)
