"""The CI-sized fault campaign: every kind of fault, every invariant, in one round
(about a minute). The seed is printed (and in the failure message); set
TURNKEEPER_FAULTS_SEED to run the same plan again."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest

from tests.faults.campaign import CI, Campaign

# The CI plan takes about a minute on an idle 2-core machine; the timeout is for a
# hang, and leaves room for a loaded one (parallel workers, other jobs).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(360)]


def nats_story(logs: Path, lines: int = 30) -> str:
    """The last lines of the nats-server's own log (with -D: each connection made
    and closed, and why) and of the service's NATS link: what a violation about NATS
    (an outbox that stopped draining, messages the mirror never saw) needs first.
    The whole logs stay in `logs`."""
    parts = []
    server = logs / "nats-server.log"
    if server.exists():
        tail = server.read_text(errors="replace").splitlines()[-lines:]
        parts.append(f"-- the last {len(tail)} lines of {server}:\n" + "\n".join(tail))
    for path in sorted(logs.glob("service*.log")):
        link = [
            line
            for line in path.read_text(errors="replace").splitlines()
            if "messaging.link" in line
        ][-lines:]
        parts.append(
            f"-- the service's NATS link, last {len(link)} lines of {path}:\n" + "\n".join(link)
        )
    return "\n".join(parts)


@pytest.mark.parametrize(
    ("backend", "shared_stream"),
    [
        # The agents' runs on one checkpoint stream, the host's default (decision
        # 600): a stale attempt's message refused on its own, the other runs going on.
        pytest.param("sqlite", True, id="sqlite"),
        # The four variants run with `pytest --full` (decision 278): each is a whole
        # campaign of its own, up to two minutes of two cores.
        pytest.param("postgres", True, id="postgres", marks=pytest.mark.full),
        # A stream per run (TURNKEEPER_SAVER_SHARE_STREAM=0), the other transport.
        pytest.param("sqlite", False, id="sqlite-stream-per-run", marks=pytest.mark.full),
        pytest.param("postgres", False, id="postgres-stream-per-run", marks=pytest.mark.full),
        # Version policy pin: a rolling upgrade keeps one replica on v1, and no turn
        # runs on two versions (docs/versions.md).
        pytest.param("sqlite-pin", False, id="sqlite-pin", marks=pytest.mark.full),
    ],
)
async def test_no_invariant_breaks_under_faults(
    tmp_path: Path, backend: str, shared_stream: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, _, policy = backend.partition("-")
    # The agents are subprocesses: they take the saver's transport from the environment.
    monkeypatch.setenv("TURNKEEPER_SAVER_SHARE_STREAM", "1" if shared_stream else "0")
    env_seed = os.environ.get("TURNKEEPER_FAULTS_SEED")
    seed = int(env_seed) if env_seed else random.SystemRandom().randrange(2**32)
    print(f"fault campaign on {backend}, seed {seed}; logs in {tmp_path / 'logs'}")
    plan = dataclasses.replace(CI, version_policy=policy)
    result = await Campaign(plan, seed, tmp_path, backend).run()
    assert not result.violations, (
        f"seed {seed}: {len(result.violations)} violations\n{result.checks.summary()}\n"
        f"{nats_story(tmp_path / 'logs')}"
    )
    c = result.counts
    # Every kind of fault was injected, and the turns really ran through them.
    assert result.rounds == CI.min_rounds
    assert c.agent_kills >= CI.target_kills
    # Each big fault once a round.
    big = (c.service_kills, c.nats_restarts, len(c.zombies), c.disk_windows, c.upgrades)
    assert big == (result.rounds,) * 5
    assert result.storage_refusals > 0
    assert result.poison_kills >= 1
    assert result.tally.done > 0 and result.tally.acked_events > 0
    # step3's effect reached the receiver, through the ledger.
    assert result.tally.effects > 0 and result.tally.effect_executions > 0
    # The round's cron fired among the faults, its runs' webhooks were delivered, and
    # the nodes' store writes were checked (tests/faults/crons.py, invariants.py).
    t = result.tally
    assert t.crons == result.rounds and t.cron_runs > 0
    assert t.webhooks > 0 and t.webhook_deliveries >= t.webhooks
    assert t.store_puts > 0 and t.store_items > 0
