"""The claim of a cron's tick (journal/crons.py): one claimer at a time, taken over
once its lease lapses, and fenced: a claimer whose claim was taken over moves
nothing on; the tick's run id is the same whoever fires it."""

from __future__ import annotations

import time

import pytest
from turnkeeper_server.engine.crons import Crons
from turnkeeper_server.journal import crons
from turnkeeper_server.journal.crons import CRON, CronRecord, tick_run_id
from turnkeeper_server.store import Store

pytestmark = pytest.mark.both_backends


def _cron(due: float) -> CronRecord:
    return CronRecord(
        cron_id="c-1",
        kind=CRON,
        assistant_id="a-1",
        thread_id=None,
        run_id=None,
        schedule="* * * * * */2",
        timezone=None,
        payload={"assistant_id": "a-1"},
        metadata={},
        webhook=None,
        on_run_completed="delete",
        end_time=None,
        enabled=True,
        owner="",
        acts_as={},
        user_id=None,
        next_run_at=due,
        created_at=due,
        updated_at=due,
    )


async def test_a_tick_is_claimed_once_taken_over_after_its_lease_and_fenced(
    store: Store,
) -> None:
    engine = Crons(store)
    tick = time.time() - 1.0
    await engine.put(_cron(tick))

    _, mine = await engine.claim_due("x", lambda _: 60.0, 10)
    _, theirs = await engine.claim_due("y", lambda _: 60.0, 10)
    assert [c.cron_id for c in mine] == ["c-1"] and theirs == []

    # x's claim lapses (its replica died): y takes the same tick, same run.
    await store.write(
        lambda tx: tx.execute("UPDATE main.crons SET claim_expires_at = ?", (time.time() - 1,))
    )
    _, taken = await engine.claim_due("y", lambda _: 60.0, 10)
    assert [c.next_run_at for c in taken] == [tick]
    assert tick_run_id("c-1", tick) == tick_run_id("c-1", taken[0].next_run_at or 0.0)

    # x comes back late: fenced, nothing moves.
    assert not await engine.advance("c-1", "x", tick, tick + 2, fired=True)
    assert await engine.advance("c-1", "y", tick, tick + 2, fired=True)
    after = await store.read(lambda conn: crons.get(conn, "c-1"))
    assert after is not None
    assert (after.next_run_at, after.claimed_by, after.fired) == (tick + 2, None, 1)
    # The tick fired is not due again.
    _, again = await engine.claim_due("x", lambda _: 60.0, 10)
    assert again == []
