"""An agent's announcements cannot grow the service without bound
(messaging/directory.py, decision 275): 300 replicas announcing 512 KiB shapes of 300
versions leave the service holding at most MAX_REPLICAS replicas and MAX_VERSIONS
shapes for the agent, its memory grows by a few MiB (before: +150 MiB), and the
refusals are a few log lines, not 300.

A real service and a real nats-server; announcements published as a bridge does."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path

import nats
import pytest
from turnkeeper_server.app import TurnkeeperServer
from turnkeeper_server.messaging.directory import MAX_REPLICAS, MAX_VERSIONS, AgentDirectory

from tests.support.nats import NatsServer

AGENT = "greedy"
SHAPE_BYTES = 512 << 10
FLOOD = 300
BATCH = 25


def rss_bytes() -> int:
    """This process's resident memory (the service runs in it)."""
    found = re.search(r"VmRSS:\s+(\d+) kB", Path("/proc/self/status").read_text())
    assert found is not None
    return int(found.group(1)) * 1024


def announcement(replica: str, version: int) -> bytes:
    # One big string: its memory is exactly what the service keeps of it.
    shape = {"nodes": f"{version}:".ljust(SHAPE_BYTES, "x")}
    body = {
        "replica": replica,
        "incarnation": "i1",
        "graph": {"fingerprint": f"fp-{version}", "label": f"v{version}", "shape": shape},
    }
    return json.dumps(body).encode()


async def heard(directory: AgentDirectory, agent: str, replica: str, attempts: int = 1500) -> bool:
    """Whether the service hears `replica` of `agent` within `attempts` / 50 s. It hears
    announcements on its own NATS connection, which nothing outside it can await:
    asked again until it shows (NATS delivers one publisher's messages in order, so
    everything published before it has been heard too)."""
    for _ in range(attempts):
        if replica in {r.replica for r in directory.replicas(agent)}:
            return True
        await asyncio.sleep(0.02)
    return False


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc/self/status")
async def test_one_agents_announcements_are_bounded_in_number_and_memory(
    service: TurnkeeperServer, nats_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    directory = service.engine.directory
    nc = await nats.connect(nats_server.url)
    try:
        subject = f"vystak.default.agents.{AGENT}.announce"
        marker = "vystak.default.agents.marker.announce"
        # Once the service's subscription is known to be there (a message published
        # before it is lost, so published again until heard).
        for _ in range(150):
            await nc.publish(marker, json.dumps({"replica": "m-0"}).encode())
            if await heard(directory, "marker", "m-0", attempts=10):
                break
        before = rss_bytes()
        with caplog.at_level(logging.WARNING, logger="turnkeeper_server.messaging.directory"):
            # Every replica its own version, in batches the service's subscription
            # holds (a NATS client drops what passes its pending limit, 64 MiB).
            for n in range(FLOOD):
                await nc.publish(subject, announcement(f"r-{n}", n))
                if n % BATCH == BATCH - 1:
                    await nc.publish(marker, json.dumps({"replica": f"m-{n}"}).encode())
                    assert await heard(directory, "marker", f"m-{n}")
        grown = rss_bytes() - before
    finally:
        await nc.close()
    # Before: 300 shapes of 512 KiB held, +150 MiB. Now at most MAX_VERSIONS of them.
    assert grown < 48 << 20, f"the service grew by {grown >> 20} MiB"
    kept = directory.replicas(AGENT)
    assert 0 < len(kept) <= MAX_REPLICAS
    assert len({r.fingerprint for r in kept}) <= MAX_VERSIONS
    assert len({id(r.shape) for r in kept}) <= MAX_VERSIONS
    refusals = [r for r in caplog.records if "refused the announcement" in r.getMessage()]
    assert refusals, "the refusals are logged"
    # One line a second at most, each with a count of the ones it stands for: far
    # fewer lines than refusals.
    assert directory.refusals.total >= FLOOD - MAX_VERSIONS
    assert len(refusals) < directory.refusals.total / 5
    assert all("graph versions already" in r.getMessage() for r in refusals)
