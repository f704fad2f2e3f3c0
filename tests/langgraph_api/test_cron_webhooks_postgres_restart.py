"""A cron every 2 s with a webhook, on two service replicas of one PostgreSQL
database, through a PostgreSQL restart (fast shutdown: every connection cut
mid-transaction, then a start on the same directory): exactly one run per tick
the catch-up rule owes (decision 331: the ticks missed while the database was
down fire once when it is back, then on schedule), and one webhook per run at a
receiver that deduplicates by key (tests/support/webhook_receiver.py), every one
signed. The default run restarts PostgreSQL once over a few ticks; `pytest --full`
restarts it three times and SIGKILLs a replica while the database is down.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.journal.crons import tick_run_id

from tests.langgraph_api.conftest import GRAPHS
from tests.langgraph_api.test_sdk_crons import ASSISTANT, EVERY_2S, question
from tests.support.langgraph_host import start_host
from tests.support.nats import NatsServer
from tests.support.postgres import PostgresCluster
from tests.support.procs import ServiceProcess
from tests.support.webhook_receiver import SECRET, Receiver, running, service_flags

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400), pytest.mark.postgres_only]

_HTTP = re.compile(r"console and HTTP API on (http://\S+?)/?$")
PERIOD = 2.0


@pytest.fixture
async def hooks() -> AsyncIterator[Receiver]:
    """The receiver process: counts deliveries by key, applies each key once."""
    async with running() as started:
        yield started


def _replica(data_dir: Path, database: str, nats_url: str, secret: Path) -> ServiceProcess:
    return ServiceProcess(
        data_dir,
        database_url=database,
        nats_url=nats_url,
        extra=["--http-port", "0", *service_flags(secret)],
    )


def _http_url(replica: ServiceProcess) -> str:
    """The HTTP side's URL of the replica's latest start."""
    for line in reversed(replica.log):
        if found := _HTTP.search(line):
            return found.group(1)
    raise AssertionError("no HTTP side announced")


async def _runs(client: LangGraphClient, cron_id: str) -> dict[str, float]:
    """The cron's runs (each on a thread of its own, tagged with the cron's id) and
    when each was made. Asked again while a replica cannot answer (the database is
    coming back): the outage is the fault at work, not a verdict."""
    while True:
        try:
            threads = await client.threads.search(metadata={"cron_id": cron_id}, limit=1000)
            found: dict[str, float] = {}
            for thread in threads:
                for run in await client.runs.list(thread["thread_id"]):
                    made = datetime.fromisoformat(str(run["created_at"]))
                    found[run["run_id"]] = made.timestamp()
            return found
        except Exception:  # a 5xx, a connection cut while the database comes back
            await asyncio.sleep(0.2)  # back-off between tries, not synchronisation


async def _outage(
    postgres_cluster: PostgresCluster, kill: ServiceProcess | None
) -> tuple[float, float, float]:
    """PostgreSQL stopped for two ticks (and a replica SIGKILLed while it is down,
    restarted after), then started: when its stop began, when it was down, and
    when it was back."""
    down = time.time()
    await asyncio.to_thread(postgres_cluster.stop_server)
    stopped = time.time()
    try:
        if kill is not None:
            kill.kill()
        # The outage itself: two ticks of the schedule with the database down.
        await asyncio.sleep(2 * PERIOD + 0.5)
    finally:
        await asyncio.to_thread(postgres_cluster.start_server)
    up = time.time()
    if kill is not None:
        await asyncio.to_thread(kill.start)
    return down, stopped, up


async def _campaign(
    tmp_path: Path,
    postgres_cluster: PostgresCluster,
    nats_server: NatsServer,
    hooks: Receiver,
    *,
    outages: int,
    kill: bool,
    between: int,
) -> None:
    secret = tmp_path / "webhook-secret"
    secret.write_text(SECRET + "\n")
    database = postgres_cluster.new_database()
    a = _replica(tmp_path / "a", database, nats_server.url, secret)
    b = _replica(tmp_path / "b", database, nats_server.url, secret)
    host = None
    client: LangGraphClient | None = None
    windows: list[tuple[float, float, float]] = []
    try:
        addresses = [await asyncio.to_thread(r.start) for r in (a, b)]
        await asyncio.to_thread(b.wait_line, _HTTP)
        host = await start_host(
            GRAPHS,
            service=",".join(addresses),
            nats_url=nats_server.url,
            replica="lg-pg",
            step_delay=0.01,
        )
        # Asked through b, which is never SIGKILLed.
        client = get_client(url=_http_url(b))
        cron: Any = await client.crons.create(
            ASSISTANT, schedule=EVERY_2S, input=question("tick"), webhook=f"{hooks.url}/hook"
        )
        cron_id = cron["cron_id"]
        first = datetime.fromisoformat(cron["next_run_date"]).timestamp()
        for n in range(outages):
            # `between` runs delivered before each outage, and after the last.
            await hooks.wait_applied(len(await _runs(client, cron_id)) + between)
            windows.append(await _outage(postgres_cluster, a if kill and n % 2 else None))
        await hooks.wait_applied(len(await _runs(client, cron_id)) + between)
        await client.crons.delete(cron_id)
        made = await _runs(client, cron_id)
        # Every run ended and was delivered, each applied once under its own key.
        counts = await hooks.wait_applied(len(made))
        assert await _runs(client, cron_id) == made, "a run started after its cron was deleted"
    finally:
        if client is not None:
            await client.http.client.aclose()
        if host is not None:
            await host.close()
        for replica in (a, b):
            replica.kill()

    assert counts["bad_signatures"] == 0
    assert sorted(counts["applied"]) == sorted(made), "a run without its webhook, or one twice"
    for run_id, body in counts["applied"].items():
        assert (body["run_id"], body["status"]) == (run_id, "success"), body
    # One run per tick: each run is a tick's (its id is the tick's). No tick can be
    # claimed while the database is down, and the catch-up rule fires the one owed
    # once it is back, then the schedule's first tick after that claim: of the ticks
    # while it was down, at most one fired. A tick is missing only where the rule
    # skips it: from a tick before the database went down to the first run made
    # after it came back (and a tick, for a claim made again then).
    last = max(made.values())
    ticks = {tick_run_id(cron_id, first + PERIOD * i): first + PERIOD * i for i in range(10_000)}
    ticks = {run_id: tick for run_id, tick in ticks.items() if tick <= last}
    assert set(made) <= set(ticks), "a run that is no tick of the schedule"
    fired = sorted(ticks[run_id] for run_id in made)
    assert fired[0] == first
    skipped = [t for r, t in ticks.items() if r not in made]
    for down, stopped, up in windows:
        during = [t for t in fired if stopped < t < up]
        assert len(during) <= 1, f"the outage's ticks fired {len(during)} times: {during}"
        resumed = min(at for at in made.values() if at >= up)
        skipped = [t for t in skipped if not down - PERIOD < t < resumed + PERIOD]
    assert not skipped, f"ticks {skipped} skipped outside the outages {windows}"
    # The schedule went on after the last outage.
    assert any(t > windows[-1][2] for t in fired)


async def test_a_cron_and_its_webhooks_survive_a_postgresql_restart(
    tmp_path: Path, postgres_cluster: PostgresCluster, nats_server: NatsServer, hooks: Receiver
) -> None:
    await _campaign(
        tmp_path, postgres_cluster, nats_server, hooks, outages=1, kill=False, between=2
    )


@pytest.mark.full
async def test_a_cron_and_its_webhooks_through_postgresql_restarts_and_a_replica_sigkill(
    tmp_path: Path, postgres_cluster: PostgresCluster, nats_server: NatsServer, hooks: Receiver
) -> None:
    await _campaign(tmp_path, postgres_cluster, nats_server, hooks, outages=3, kill=True, between=5)
