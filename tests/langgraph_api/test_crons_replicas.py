"""A cron every 2 s on two service replicas of one PostgreSQL database, one of them
SIGKILLed and restarted while it runs: every tick is one run, none skipped, none
twice (each replica claims the ticks it finds due; the run's id is the tick's, so a
claim taken over after a SIGKILL starts the same run). The default run keeps a
reduced campaign; `pytest --full` runs it for a minute."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from turnkeeper_server.journal.crons import tick_run_id

from tests.langgraph_api.conftest import GRAPHS
from tests.langgraph_api.test_sdk_crons import (
    ASSISTANT,
    EVERY_2S,
    cron_runs,
    eventually,
    question,
)
from tests.support.langgraph_host import start_host
from tests.support.nats import NatsServer
from tests.support.postgres import PostgresCluster
from tests.support.procs import ServiceProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

_HTTP = re.compile(r"console and HTTP API on (http://\S+?)/?$")


def _replica(data_dir: Path, database: str, nats_url: str) -> ServiceProcess:
    return ServiceProcess(
        data_dir, database_url=database, nats_url=nats_url, extra=["--http-port", "0"]
    )


async def _runs_reach(client: LangGraphClient, cron_id: str, n: int) -> list[str]:
    """The cron's runs once there are at least n."""

    async def enough() -> list[str] | None:
        found = await cron_runs(client, cron_id)
        return found if len(found) >= n else None

    return await eventually(enough, f"{n} runs of the cron")


async def _campaign(
    tmp_path: Path, postgres_cluster: PostgresCluster, nats_server: NatsServer, ticks: int
) -> None:
    database = postgres_cluster.new_database()
    a = _replica(tmp_path / "a", database, nats_server.url)
    b = _replica(tmp_path / "b", database, nats_server.url)
    host = None
    try:
        addresses = [await asyncio.to_thread(r.start) for r in (a, b)]
        url = (await asyncio.to_thread(b.wait_line, _HTTP)).group(1)
        host = await start_host(
            GRAPHS,
            service=",".join(addresses),
            nats_url=nats_server.url,
            replica="lg-1",
            step_delay=0.01,
        )
        client = get_client(url=url)
        try:
            cron: Any = await client.crons.create(
                ASSISTANT, schedule=EVERY_2S, input=question("tick")
            )
            cron_id = cron["cron_id"]
            first = datetime.fromisoformat(cron["next_run_date"]).timestamp()
            await _runs_reach(client, cron_id, 2)
            a.kill()
            await _runs_reach(client, cron_id, 4)
            await asyncio.to_thread(a.start)
            found = await _runs_reach(client, cron_id, ticks)
            # Every tick from the first to the last one fired, each one run.
            expected = [tick_run_id(cron_id, first + 2.0 * i) for i in range(len(found))]
            assert sorted(found) == sorted(expected), "a tick was skipped or run twice"
            await client.crons.delete(cron_id)
        finally:
            await client.http.client.aclose()
    finally:
        if host is not None:
            await host.close()
        for replica in (a, b):
            replica.kill()


@pytest.mark.postgres_only
async def test_a_cron_across_two_replicas_one_sigkilled_fires_each_tick_once(
    tmp_path: Path, postgres_cluster: PostgresCluster, nats_server: NatsServer
) -> None:
    await _campaign(tmp_path, postgres_cluster, nats_server, ticks=8)


@pytest.mark.full
@pytest.mark.postgres_only
async def test_a_minute_of_a_cron_across_two_replicas_one_sigkilled(
    tmp_path: Path, postgres_cluster: PostgresCluster, nats_server: NatsServer
) -> None:
    await _campaign(tmp_path, postgres_cluster, nats_server, ticks=30)


def _http_url(replica: ServiceProcess) -> str:
    """The HTTP side's URL of the replica's latest start."""
    for line in reversed(replica.log):
        if found := _HTTP.search(line):
            return found.group(1)
    raise AssertionError("no HTTP side announced")


def _fired(database: str, cron_id: str) -> set[str]:
    """The runs of the cron's ticks in the journal (read while no replica is up)."""
    with psycopg.connect(database) as conn:
        rows = conn.execute(
            "SELECT t.turn_id FROM turns t JOIN threads h ON h.thread_id = t.thread_id "
            "WHERE h.metadata LIKE %s",
            (f"%{cron_id}%",),
        ).fetchall()
    return {row[0] for row in rows}


@pytest.mark.full
@pytest.mark.postgres_only
async def test_an_outage_of_ten_ticks_fires_once_when_a_replica_comes_back(
    tmp_path: Path, postgres_cluster: PostgresCluster, nats_server: NatsServer
) -> None:
    database = postgres_cluster.new_database()
    a = _replica(tmp_path / "a", database, nats_server.url)
    host = None
    try:
        address = await asyncio.to_thread(a.start)
        await asyncio.to_thread(a.wait_line, _HTTP)
        host = await start_host(
            GRAPHS, service=address, nats_url=nats_server.url, replica="lg-1", step_delay=0.01
        )
        client = get_client(url=_http_url(a))
        cron: Any = await client.crons.create(ASSISTANT, schedule=EVERY_2S, input=question("t"))
        cron_id = cron["cron_id"]
        await _runs_reach(client, cron_id, 2)
        await client.http.client.aclose()
        a.kill()
        down = time.time()
        before = _fired(database, cron_id)
        # The outage itself: ten ticks of the schedule with no replica up.
        await asyncio.sleep(20.5)
        back = time.time()
        await asyncio.to_thread(a.start)
        client = get_client(url=_http_url(a))
        try:
            found = await _runs_reach(client, cron_id, len(before) + 3)
            await client.crons.delete(cron_id)
        finally:
            await client.http.client.aclose()
        new = set(found) - before
        outage = {tick_run_id(cron_id, float(g)) for g in range(int(down) - 4, int(back) + 1)}
        late = {tick_run_id(cron_id, float(g)) for g in range(int(back) + 1, int(back) + 600)}
        # Once for the ticks missed, then on schedule.
        assert len(new & outage) == 1, "the outage did not fire exactly once"
        assert new - outage <= late
    finally:
        if host is not None:
            await host.close()
        a.kill()
