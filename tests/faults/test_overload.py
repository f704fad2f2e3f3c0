"""Overload is not death (issue 51): the campaign's turns, no fault injected, on a
machine oversubscribed by CPU hogs at twice its core count for the whole run. Every
turn finishes, none fails, and none is re-driven: no agent died, so a re-drive would
have declared a live agent's turn dead (each one is reported with its cause)."""

from __future__ import annotations

import os
import random
import statistics
from pathlib import Path

import pytest

from tests.faults.campaign import OVERLOAD, OVERLOAD_FULL, Campaign, Plan

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def p99(seconds: list[float]) -> float:
    ordered = sorted(seconds)
    return ordered[int(0.99 * (len(ordered) - 1))] if ordered else 0.0


@pytest.mark.parametrize(
    "plan",
    [
        pytest.param(OVERLOAD, id="reduced"),
        pytest.param(OVERLOAD_FULL, id="full", marks=pytest.mark.full),
    ],
)
async def test_an_oversubscribed_machine_fails_and_redrives_no_healthy_turn(
    tmp_path: Path, plan: Plan
) -> None:
    env_seed = os.environ.get("TURNKEEPER_FAULTS_SEED")
    seed = int(env_seed) if env_seed else random.SystemRandom().randrange(2**32)
    print(f"overload campaign, seed {seed}; logs in {tmp_path / 'logs'}")
    result = await Campaign(plan, seed, tmp_path).run()
    secs = result.turn_seconds
    print(
        f"turn run time under {plan.hogs_per_core}x oversubscription: median "
        f"{statistics.median(secs) if secs else 0:.1f} s, p99 {p99(secs):.1f} s"
    )
    assert not result.violations, (
        f"seed {seed}: {len(result.violations)} violations\n{result.checks.summary()}"
    )
    t = result.tally
    # All finished (a turn left RUNNING is a violation above), none failed.
    assert result.turns >= plan.turns * plan.min_rounds
    assert t.failed_at_cap == 0
    assert t.done + t.parked == result.turns, t.by_kind
    # No re-drive of a live agent's turn: every one is listed with its cause.
    assert not result.redrives, "\n".join(r.describe() for r in result.redrives)
