"""Crons and webhooks among the campaign's turns (issue 50): each round makes a cron
on the fault agent's graph through LangGraph's own SDK (the service's HTTP side),
firing every ``period`` seconds with a webhook to a receiver process that
deduplicates by key (tests/support/webhook_receiver.py). It is made before the
round's faults start and stopped at the round's end (or ends by itself after
``ticks`` ticks: its ``end_time``). Its runs are plain turns that keep a memory in
the store, re-driven, fenced and checked like the others.

What must hold after the round (each a counted check):

- one run per tick: every run of the cron is a tick of its schedule (its id is the
  tick's, journal/crons.py), the first tick fired, and no tick fired once per
  missed tick: by the catch-up rule (decision 331) the tick after a run is the
  schedule's first after that run's tick was claimed, so it comes after the run was
  made, less the time a launch takes (``LAUNCH_SLACK``). Ticks without a run (the
  ones the catch-up rule skipped: no replica could fire them) are counted;
- every run ended, DONE or FAILED at the re-drive cap like any turn, with its
  memory in the store (invariants.py's ``memory``);
- every ended run was delivered: applied at the receiver under its run's id (the
  webhook's key), once, signed, with its run's status; a delivery made again after
  a fault cut it short is counted, and the receiver did not apply it twice; nothing
  was delivered for a run that is none of the crons'.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError
from turnkeeper.errors import TurnkeeperError
from turnkeeper.v1 import turns_pb2
from turnkeeper_server.journal.crons import tick_run_id

from tests.faults.checks import Checks
from tests.faults.cluster import AGENT, Cluster
from tests.faults.invariants import MAX_REDRIVES, STATES, RoundCheck, Tally

T = TypeVar("T")
# How long a launch may take from a tick's claim to its run being made, on a
# machine the faults and the campaign's turns keep busy.
LAUNCH_SLACK = 5.0
# How long the harness asks again while no replica answers (a fault at work).
PATIENCE = 90.0


@dataclass
class RoundCron:
    cron_id: str
    first: float
    # run id -> when it was made (the service's clock), filled by the check.
    runs: dict[str, float] = field(default_factory=dict)


class Crons:
    def __init__(
        self, cluster: Cluster, checks: Checks, tally: Tally, *, period: int, ticks: int
    ) -> None:
        self.c = cluster
        self.checks = checks
        self.tally = tally
        self.period = period
        # 0: the cron fires until the round's end.
        self.ticks = ticks
        # Every run of every round's cron: what the receiver may have been sent.
        self.known: set[str] = set()

    async def _ask(self, what: str, call: Callable[[LangGraphClient], Awaitable[T]]) -> T | None:
        """`call` on a live replica's HTTP side, asked again while none answers."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + PATIENCE
        last: Exception | None = None
        while loop.time() < give_up:
            for url in self.c.http_urls():
                client = get_client(url=url, api_key=self.c.tokens["harness"])
                try:
                    return await call(client)
                except NotFoundError:
                    raise
                except Exception as exc:  # a replica down or its database: the fault
                    last = exc
                finally:
                    await client.http.client.aclose()
            await asyncio.sleep(0.2)  # back-off between tries, not synchronisation
        self.checks.expect(False, f"{what}: no replica answered in {PATIENCE:.0f}s ({last!r})")
        return None

    async def start(self, round_: int) -> RoundCron | None:
        end = None
        if self.ticks:
            end = datetime.fromtimestamp(time.time() + self.period * (self.ticks + 0.5), UTC)
        made: Any = await self._ask(
            "crons.create",
            lambda client: client.crons.create(
                AGENT,
                schedule=f"* * * * * */{self.period}",
                input={"job": f"cron-r{round_}", "kind": "plain", "results": [], "memory": True},
                webhook=f"{self.c.hooks_url}/hook",
                on_run_completed="keep",
                end_time=end,
            ),
        )
        if made is None:
            return None
        self.tally.crons += 1
        first = datetime.fromisoformat(made["next_run_date"]).timestamp()
        return RoundCron(made["cron_id"], first)

    async def stop(self, cron: RoundCron) -> None:
        async def delete(client: LangGraphClient) -> None:
            # Not found: an earlier try, whose answer was lost, deleted it.
            with contextlib.suppress(NotFoundError):
                await client.crons.delete(cron.cron_id)

        await self._ask("crons.delete", delete)

    async def _runs(self, cron: RoundCron) -> dict[str, float]:
        async def listed(client: LangGraphClient) -> dict[str, float]:
            threads = await client.threads.search(metadata={"cron_id": cron.cron_id}, limit=1000)
            found: dict[str, float] = {}
            for thread in threads:
                for run in await client.runs.list(thread["thread_id"]):
                    made = datetime.fromisoformat(str(run["created_at"]))
                    found[run["run_id"]] = made.timestamp()
            return found

        return await self._ask("the cron's runs", listed) or {}

    async def _ended(self, run_id: str) -> turns_pb2.Turn | None:
        """The run's turn once it ended (a re-driven one takes a while)."""
        client = self.c.client
        assert client is not None
        loop = asyncio.get_running_loop()
        give_up = loop.time() + PATIENCE
        while loop.time() < give_up:
            try:
                turn = (await client.get_turn(turns_pb2.GetTurnRequest(turn_id=run_id))).turn
                if STATES[turn.state] in ("DONE", "FAILED"):
                    return turn
            except TurnkeeperError:
                pass  # the service is coming back: asked again
            await asyncio.sleep(0.2)  # a bounded poll of another process's state
        self.checks.expect(False, f"cron run {run_id}: not ended {PATIENCE:.0f}s after its round")
        return None

    async def _counts(self, want: set[str]) -> dict[str, Any]:
        """The receiver's counts once it applied every id of `want` (bounded)."""

        def fetch() -> dict[str, Any]:
            with urllib.request.urlopen(f"{self.c.hooks_url}/counts") as answer:
                found: dict[str, Any] = json.load(answer)
                return found

        loop = asyncio.get_running_loop()
        give_up = loop.time() + PATIENCE
        while True:
            counts = await asyncio.to_thread(fetch)
            if want <= set(counts["applied"]) or loop.time() > give_up:
                return counts
            await asyncio.sleep(0.2)  # a bounded poll of another process's state

    async def check(self, cron: RoundCron, check: RoundCheck) -> None:
        """After the round (the cron deleted): its runs, each once ended. Listed again
        until no new one shows up (a tick claimed as the cron was deleted)."""
        ended: dict[str, str] = {}
        looked: set[str] = set()
        while True:
            cron.runs = await self._runs(cron)
            new = sorted(set(cron.runs) - looked)
            if not new:
                break
            looked |= set(new)
            for run_id in new:
                turn = await self._ended(run_id)
                if turn is None:
                    continue
                state = STATES[turn.state]
                at_cap = turn.crashes_charged == MAX_REDRIVES and "re-drive cap" in turn.error
                self.checks.expect(
                    state == "DONE" or at_cap, f"cron run {run_id}: {state}: {turn.error!r}"
                )
                self.tally.by_kind[f"cron {state}"] += 1
                ended[run_id] = state
                check.records.read()
                await check.memory(run_id, state, "plain")
        self.known |= set(cron.runs)
        self.tally.cron_runs += len(cron.runs)
        self._ticks(cron)
        self._webhooks(ended, await self._counts(set(ended)))

    def _ticks(self, cron: RoundCron) -> None:
        if not self.checks.expect(bool(cron.runs), f"cron {cron.cron_id}: no run in its round"):
            return
        period = float(self.period)
        last = max(cron.runs.values()) + period
        count = int((last - cron.first) / period) + 1
        ticks = {tick_run_id(cron.cron_id, cron.first + period * i): i for i in range(count)}
        stray = sorted(set(cron.runs) - set(ticks))
        self.checks.expect(not stray, f"cron {cron.cron_id}: runs {stray} are no tick of it")
        fired = sorted(ticks[r] for r in cron.runs if r in ticks)
        if not fired:
            return
        self.checks.expect(fired[0] == 0, f"cron {cron.cron_id}: its first tick never fired")
        made = {ticks[r]: at for r, at in cron.runs.items() if r in ticks}
        for a, b in itertools.pairwise(fired):
            self.tally.cron_skipped += b - a - 1
            # Never once per missed tick: the tick after a run is after its claim.
            self.checks.expect(
                cron.first + period * b > made[a] - LAUNCH_SLACK,
                f"cron {cron.cron_id}: tick {b} fired after tick {a}, whose run was made "
                f"{made[a] - cron.first - period * a:.1f}s late: a missed tick fired again",
            )

    def _webhooks(self, ended: dict[str, str], counts: dict[str, Any]) -> None:
        self.checks.expect(
            counts["bad_signatures"] == 0,
            f"the webhook receiver saw {counts['bad_signatures']} bad signatures",
        )
        applied = counts["applied"]
        strangers = sorted(set(applied) - self.known)
        self.checks.expect(not strangers, f"webhooks delivered for no cron run: {strangers}")
        for run_id, state in ended.items():
            body = applied.get(run_id)
            if not self.checks.expect(
                body is not None, f"cron run {run_id}: ended {state}, its webhook never applied"
            ):
                continue
            assert body is not None
            status = "success" if state == "DONE" else "error"
            self.checks.expect(
                (body.get("run_id"), body.get("status")) == (run_id, status),
                f"cron run {run_id}: ended {state}, delivered as {body.get('status')!r} "
                f"for run {body.get('run_id')!r}",
            )
            self.tally.webhooks += 1
            self.tally.webhook_deliveries += counts["deliveries"].get(run_id, 0)
