"""Crons and runs started later through LangGraph's Python SDK, unchanged:
`client.crons.create`, `create_for_thread`, `search`, `count`, `update`, `delete`;
a cron every 2 s fires one run per tick; ticks missed while no replica was up fire
once (the catch-up rule, docs/langgraph-api.md); `after_seconds` is a run kept in
the journal, pending until due, that starts after a restart of the service."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient
from langgraph_sdk.errors import NotFoundError, UnprocessableEntityError
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.journal.crons import tick_run_id

from tests.langgraph_api.conftest import GRAPHS
from tests.support.agents import Agent
from tests.support.langgraph_host import start_host
from tests.support.nats import NatsServer
from tests.support.service import ServiceFactory

pytestmark = pytest.mark.timeout(120)

ASSISTANT = "durable-execution"
EVERY_2S = "* * * * * */2"
T = TypeVar("T")


def question(text: str) -> Any:
    return {"messages": [{"role": "user", "content": text}]}


async def eventually(probe: Callable[[], Awaitable[T | None]], what: str) -> T:
    """`probe`'s first answer that is not None, asked again every 0.2 s (the
    test's timeout bounds it)."""
    while True:
        found = await probe()
        if found is not None:
            return found
        await asyncio.sleep(0.2)


async def cron_runs(sdk: LangGraphClient, cron_id: str) -> list[str]:
    """The run ids of a thread-less cron's runs (each on a thread of its own,
    tagged with the cron's id), oldest first."""
    threads = await sdk.threads.search(metadata={"cron_id": cron_id}, limit=100)
    found: list[tuple[str, str]] = []
    for thread in threads:
        for run in await sdk.runs.list(thread["thread_id"]):
            found.append((str(run["created_at"]), run["run_id"]))
    return [run_id for _, run_id in sorted(found)]


async def test_crons_over_the_sdk(sdk: LangGraphClient) -> None:
    thread = await sdk.threads.create()
    made: Any = await sdk.crons.create(
        ASSISTANT, schedule="0 12 * * *", input=question("noon"), metadata={"team": "a"}
    )
    assert made["schedule"] == "0 12 * * *"
    assert made["thread_id"] is None and made["on_run_completed"] == "delete"
    assert made["next_run_date"].endswith("12:00:00+00:00")
    assert made["payload"]["input"] == question("noon")
    on_thread: Any = await sdk.crons.create_for_thread(
        thread["thread_id"], ASSISTANT, schedule="30 6 * * 1", timezone="Europe/Oslo"
    )
    assert on_thread["thread_id"] == thread["thread_id"]
    assert on_thread["timezone"] == "Europe/Oslo"

    found = await sdk.crons.search(assistant_id=ASSISTANT)
    assert {c["cron_id"] for c in found} == {made["cron_id"], on_thread["cron_id"]}
    assert [c["cron_id"] for c in await sdk.crons.search(thread_id=thread["thread_id"])] == [
        on_thread["cron_id"]
    ]
    assert await sdk.crons.count(metadata={"team": "a"}) == 1
    assert await sdk.crons.count() == 2
    picked = await sdk.crons.search(select=["cron_id", "enabled"], sort_by="created_at")
    assert picked[0] == {"cron_id": on_thread["cron_id"], "enabled": True}

    changed: Any = await sdk.crons.update(
        made["cron_id"], schedule="15 8 * * *", enabled=False, metadata={"b": 1}
    )
    assert changed["enabled"] is False and changed["metadata"] == {"team": "a", "b": 1}
    assert changed["next_run_date"].endswith("08:15:00+00:00")
    assert await sdk.crons.search(enabled=False) == [changed]

    await sdk.crons.delete(made["cron_id"])
    assert await sdk.crons.count() == 1
    with pytest.raises(NotFoundError):
        await sdk.crons.delete(made["cron_id"])
    # A webhook this service could not deliver (no signing secret here) is refused
    # when the cron is made, not at each tick.
    with pytest.raises(UnprocessableEntityError, match="webhook"):
        await sdk.crons.create(ASSISTANT, schedule="* * * * *", webhook="http://127.0.0.1:9/h")
    with pytest.raises(UnprocessableEntityError, match="not a cron schedule"):
        await sdk.crons.create(ASSISTANT, schedule="every minute")
    with pytest.raises(NotFoundError):
        await sdk.crons.create_for_thread(
            "00000000-0000-0000-0000-000000000001", ASSISTANT, schedule="* * * * *"
        )
    # A thread's crons go with it.
    await sdk.threads.delete(thread["thread_id"])
    assert await sdk.crons.count() == 0
    info = await sdk.http.get("/info")
    assert info["flags"]["crons"] is True


async def test_a_cron_every_two_seconds_fires_one_run_per_tick(
    sdk: LangGraphClient, service: TurnkeeperServer
) -> None:
    cron: Any = await sdk.crons.create(ASSISTANT, schedule=EVERY_2S, input=question("tick"))
    first = cron["next_run_date"]
    ticks = await eventually(lambda: _at_least(sdk, cron["cron_id"], 3), "three runs of the cron")
    await sdk.crons.delete(cron["cron_id"])
    # Each run is its tick's (its id is made of the tick), and the ticks follow one
    # another: none skipped, none twice.
    start = _epoch(first)
    expected = [tick_run_id(cron["cron_id"], start + 2.0 * i) for i in range(len(ticks))]
    assert ticks == expected
    for run_id in ticks[:3]:
        run = await _run(sdk, run_id)
        assert run["metadata"]["cron_id"] == cron["cron_id"]
        assert run["status"] in ("pending", "running", "success")


async def _at_least(sdk: LangGraphClient, cron_id: str, n: int) -> list[str] | None:
    found = await cron_runs(sdk, cron_id)
    return found if len(found) >= n else None


async def _run(sdk: LangGraphClient, run_id: str) -> dict[str, Any]:
    threads = await sdk.threads.search(limit=100)
    for thread in threads:
        for run in await sdk.runs.list(thread["thread_id"]):
            if run["run_id"] == run_id:
                return dict(run)
    raise AssertionError(f"no run {run_id}")


def _epoch(iso: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso).timestamp()


async def _restart(
    make_service: ServiceFactory, nats_server: NatsServer
) -> tuple[TurnkeeperServer, Agent, LangGraphClient]:
    again = await make_service(nats_url=nats_server.url, http_listen="127.0.0.1:0")
    host = await start_host(
        GRAPHS, service=again.address, nats_url=nats_server.url, replica="lg-2", step_delay=0.05
    )
    assert again.web is not None
    return again, host, get_client(url=again.web.url.rstrip("/"))


async def test_ticks_missed_while_no_replica_was_up_fire_once(
    sdk: LangGraphClient,
    service: TurnkeeperServer,
    host: Agent,
    make_service: ServiceFactory,
    nats_server: NatsServer,
    tmp_path: Path,
) -> None:
    cron: Any = await sdk.crons.create(ASSISTANT, schedule=EVERY_2S, input=question("tick"))
    cron_id = cron["cron_id"]
    await service.stop(0)
    await host.close()
    # An outage of ten ticks, as the journal keeps it: the tick owed is 20 s ago
    # (an odd second, off the schedule's grid, so its run is told from the others').
    owed = (int(time.time()) // 2) * 2 - 19.0
    with sqlite3.connect(tmp_path / "turns.db") as db:
        db.execute("UPDATE crons SET next_run_at = ? WHERE cron_id = ?", (owed, cron_id))
        before = {
            row[0]
            for row in db.execute(
                "SELECT t.turn_id FROM turns t JOIN threads h ON h.thread_id = t.thread_id "
                "WHERE h.metadata LIKE ?",
                (f"%{cron_id}%",),
            )
        }
    back = time.time()
    again, new_host, client = await _restart(make_service, nats_server)
    try:
        caught_up = tick_run_id(cron_id, owed)
        await eventually(lambda: _has(client, cron_id, caught_up), "the run of the tick owed")
        after = await eventually(
            lambda: _at_least(client, cron_id, len(before) + 2), "a tick on schedule after it"
        )
        new = set(after) - before
        # Once for the ten ticks missed; then only ticks on schedule from the restart on.
        assert after.count(caught_up) == 1
        on_schedule = {
            tick_run_id(cron_id, float(g)) for g in range(int(back) + 1, 600 + int(back))
        }
        assert new - {caught_up} <= on_schedule, "a missed tick was run on its own"
        record: Any = await client.crons.search()
        assert record[0]["next_run_date"] > cron["next_run_date"]
    finally:
        await client.crons.delete(cron_id)
        await client.http.client.aclose()
        await new_host.close()
        await again.stop(0)


async def _has(sdk: LangGraphClient, cron_id: str, run_id: str) -> bool | None:
    return True if run_id in await cron_runs(sdk, cron_id) else None


async def test_a_run_started_later_survives_a_restart(
    sdk: LangGraphClient,
    service: TurnkeeperServer,
    host: Agent,
    make_service: ServiceFactory,
    nats_server: NatsServer,
) -> None:
    thread = await sdk.threads.create()
    run = await sdk.runs.create(
        thread["thread_id"], ASSISTANT, input=question("later"), after_seconds=4
    )
    assert run["status"] == "pending"
    got = await sdk.runs.get(thread["thread_id"], run["run_id"])
    assert got["status"] == "pending" and got["run_id"] == run["run_id"]
    listed = await sdk.runs.list(thread["thread_id"])
    assert [r["run_id"] for r in listed] == [run["run_id"]]
    with pytest.raises(UnprocessableEntityError, match="after_seconds"):
        await sdk.runs.create(thread["thread_id"], ASSISTANT, after_seconds=-1)
    await service.stop(0)
    await host.close()

    again, new_host, client = await _restart(make_service, nats_server)
    try:
        # A join waits for the run to start, then for its end.
        await client.runs.join(thread["thread_id"], run["run_id"])
        finished: Any = await client.runs.get(thread["thread_id"], run["run_id"])
        assert finished["status"] == "success"
        assert finished["kwargs"]["input"] == question("later")
        state: Any = await client.threads.get_state(thread["thread_id"])
        assert state["values"]["messages"][0]["content"] == "later"
    finally:
        await client.http.client.aclose()
        await new_host.close()
        await again.stop(0)
