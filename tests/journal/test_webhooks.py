"""journal/webhooks.py, runs' webhook deliveries: due in the transaction that ends
the run (or at once, for a run that ended before its record), the first end only;
claimed by one deliverer at a time, again once a claim passes; an attempt's outcome
fenced by its claim; erased with the thread."""

from __future__ import annotations

import pytest
from turnkeeper_server.journal import erasure, runs, transitions, webhooks
from turnkeeper_server.journal.runs import RunRecord

from tests.journal.conftest import POLICY, Journal

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(60)]

URL = "https://hooks.example.com/runs"


async def subscribe(journal: Journal, turn_id: str) -> None:
    record = RunRecord(turn_id, {}, {"webhook": URL})
    await journal.write(lambda tx: runs.put(tx, record))


def delivery(journal: Journal, turn_id: str) -> webhooks.Delivery:
    found = webhooks.get(journal.db.read_conn(), turn_id)
    assert found is not None
    return found


async def finish(journal: Journal, turn_id: str) -> None:
    await journal.write(
        lambda tx: transitions.finish_turn(
            tx, turn_id=turn_id, attempt=0, failed=False, error="", events=[], policy=POLICY
        )
    )


async def test_a_delivery_waits_and_is_due_when_the_run_ends(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await subscribe(journal, "t1")
    assert delivery(journal, "t1").state == webhooks.WAITING
    claimed = await journal.write(
        lambda tx: webhooks.claim(tx, replica="r1", now=9e9, hold=5, limit=10)
    )
    assert claimed == []
    await finish(journal, "t1")
    due = delivery(journal, "t1")
    assert (due.state, due.run_state) == (webhooks.PENDING, "DONE")


async def test_a_run_that_ended_before_its_record_is_due_at_once(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await journal.write(
        lambda tx: transitions.park_turn(
            tx, turn_id="t1", attempt=0, interrupt_json="{}", events=[], policy=POLICY
        )
    )
    await subscribe(journal, "t1")
    due = delivery(journal, "t1")
    assert (due.state, due.run_state) == (webhooks.PENDING, "PARKED")


async def test_only_the_first_end_is_delivered(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await subscribe(journal, "t1")
    await journal.write(
        lambda tx: transitions.park_turn(
            tx, turn_id="t1", attempt=0, interrupt_json="{}", events=[], policy=POLICY
        )
    )
    [claimed] = await journal.write(
        lambda tx: webhooks.claim(tx, replica="r1", now=9e9, hold=5, limit=10)
    )
    await journal.write(
        lambda tx: webhooks.finish_attempt(
            tx,
            turn_id="t1",
            attempt=claimed.attempts,
            replica="r1",
            outcome=webhooks.DELIVERED,
            http_status=200,
            detail="",
            retry_at=None,
            now=9e9,
        )
    )
    await journal.write(
        lambda tx: transitions.resume_detached(tx, turn_id="t1", resume_json="1", policy=POLICY)
    )
    await journal.write(
        lambda tx: transitions.claim_turn(
            tx, turn_id="t1", attempt=0, replica="r", incarnation="i", policy=POLICY
        )
    )
    await finish(journal, "t1")
    after = delivery(journal, "t1")
    assert (after.state, after.run_state, after.attempts) == (webhooks.DELIVERED, "PARKED", 1)


async def test_a_claim_holds_the_delivery_and_fences_its_outcome(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await subscribe(journal, "t1")
    await finish(journal, "t1")
    now = delivery(journal, "t1").next_attempt_at or 0.0
    [first] = await journal.write(
        lambda tx: webhooks.claim(tx, replica="r1", now=now, hold=5, limit=10)
    )
    # Held: nobody else takes it meanwhile.
    assert (
        await journal.write(
            lambda tx: webhooks.claim(tx, replica="r2", now=now + 1, hold=5, limit=10)
        )
        == []
    )
    # r1 died: once the claim passed, r2 takes it, as attempt 2.
    [second] = await journal.write(
        lambda tx: webhooks.claim(tx, replica="r2", now=now + 6, hold=5, limit=10)
    )
    assert (first.attempts, second.attempts) == (1, 2)

    stale = await journal.write(
        lambda tx: webhooks.finish_attempt(
            tx,
            turn_id="t1",
            attempt=1,
            replica="r1",
            outcome=webhooks.DELIVERED,
            http_status=200,
            detail="",
            retry_at=None,
            now=now + 7,
        )
    )
    assert stale is False
    retried = await journal.write(
        lambda tx: webhooks.finish_attempt(
            tx,
            turn_id="t1",
            attempt=2,
            replica="r2",
            outcome="retry",
            http_status=503,
            detail="HTTP 503",
            retry_at=now + 100,
            now=now + 7,
        )
    )
    assert retried is True
    after = delivery(journal, "t1")
    assert (after.state, after.next_attempt_at, after.last_error) == (
        webhooks.PENDING,
        now + 100,
        "HTTP 503",
    )
    attempts = webhooks.attempts(journal.db.read_conn(), "t1")
    assert [(a.attempt, a.replica, a.outcome) for a in attempts] == [
        (1, "r1", ""),
        (2, "r2", "retry"),
    ]


async def test_a_stopping_replica_gives_its_claims_back(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await subscribe(journal, "t1")
    await finish(journal, "t1")
    now = delivery(journal, "t1").next_attempt_at or 0.0
    await journal.write(lambda tx: webhooks.claim(tx, replica="r1", now=now, hold=60, limit=10))
    assert await journal.write(lambda tx: webhooks.release(tx, replica="r1", now=now + 1)) == 1
    [again] = await journal.write(
        lambda tx: webhooks.claim(tx, replica="r2", now=now + 1, hold=60, limit=10)
    )
    assert again.attempts == 2
    attempts = webhooks.attempts(journal.db.read_conn(), "t1")
    assert [(a.replica, a.outcome) for a in attempts] == [("r1", "retry"), ("r2", "")]


async def test_erasing_the_thread_deletes_its_deliveries(journal: Journal) -> None:
    await journal.start("t1", "th1")
    await subscribe(journal, "t1")
    await finish(journal, "t1")
    await journal.write(lambda tx: webhooks.claim(tx, replica="r1", now=9e9, hold=5, limit=10))
    await journal.write(
        lambda tx: erasure.erase_thread(tx, thread_id="th1", cancel=False, policy=POLICY)
    )
    conn = journal.db.read_conn()
    assert webhooks.get(conn, "t1") is None
    assert webhooks.attempts(conn, "t1") == []
