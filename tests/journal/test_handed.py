"""A turn whose claim rides its hand-off (decision 590): the start's commit makes a
named replica its owner for a claim window, marked as not yet taken; the owner's
first heartbeat or fenced write takes it. A hand-off never taken (lost, its owner
killed before it arrived) is offered again with no attempt spent and no crash
charged; the execution a late copy of it starts is fenced."""

from __future__ import annotations

import dataclasses

import pytest
from turnkeeper_server.errors import StaleAttempt
from turnkeeper_server.journal import containment, start, transitions
from turnkeeper_server.journal.redrive import Redriven
from turnkeeper_server.records import HANDED, REOFFERED, Fence, Policy, TurnRecord
from turnkeeper_server.store import Tx

from tests.journal.conftest import POLICY, Journal

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(60)]

OWNER = ("replica-a", "incarnation-a")
OTHER = ("replica-b", "incarnation-b")
# A claim window that has passed by the time the reaper looks.
LAPSED = dataclasses.replace(POLICY, claim_seconds=0.0)


async def handed(
    journal: Journal, turn_id: str, policy: Policy = POLICY, *, new_thread: bool = False
) -> start.Started:
    request = start.StartRequest(
        turn_id=turn_id,
        thread_id=f"th-{turn_id}",
        agent="agent",
        input_json="{}",
        replica=OWNER[0],
        incarnation=OWNER[1],
        handed=True,
        new_thread=start.NewThread({}) if new_thread else None,
    )
    return await journal.write(lambda tx: start.start_turn(tx, request, policy))


async def reap(journal: Journal) -> list[Redriven]:
    return await journal.write(lambda tx: containment.reap_expired(tx, policy=POLICY))


async def heartbeat(journal: Journal, turn_id: str, attempt: int, owner: tuple[str, str]) -> float:
    return await journal.write(
        lambda tx: transitions.heartbeat(
            tx,
            turn_id=turn_id,
            attempt=attempt,
            replica=owner[0],
            incarnation=owner[1],
            policy=POLICY,
        )
    )


async def claim(journal: Journal, turn_id: str, attempt: int, owner: tuple[str, str]) -> TurnRecord:
    def op(tx: Tx) -> TurnRecord:
        turn, _, _ = transitions.claim_turn(
            tx,
            turn_id=turn_id,
            attempt=attempt,
            replica=owner[0],
            incarnation=owner[1],
            policy=POLICY,
        )
        return turn

    return await journal.write(op)


def rewinds_published(journal: Journal) -> int:
    row = journal.db.read_conn().execute("SELECT count(*) FROM outbox").fetchone()
    return int(row[0])


@pytest.mark.parametrize("new_thread", [False, True], ids=["thread", "thread made"])
async def test_the_start_claims_the_turn_for_a_claim_window_and_answers_as_claim_turn(
    journal: Journal, new_thread: bool
) -> None:
    started = await handed(journal, "t1", new_thread=new_thread)
    turn = started.turn
    assert (turn.owner_replica, turn.owner_incarnation) == OWNER
    assert turn.handed == HANDED
    # Owned, not taken: a crash of its owner now is no crash of this turn.
    assert turn.owned and not turn.taken
    assert turn.attempts == 0
    # The claim window's lease, not a full one: a lost hand-off is offered again soon.
    assert turn.lease_expires_at is not None
    assert turn.lease_expires_at - turn.updated_at == pytest.approx(POLICY.claim_seconds)
    # ClaimTurn's answer for a new thread: no checkpoint, the thread empty.
    assert (started.checkpoint_id, started.thread_empty) == ("", True)


@pytest.mark.parametrize("how", ["reaper", "not acknowledged"])
async def test_a_handoff_never_taken_is_offered_again_with_nothing_spent(
    journal: Journal, how: str
) -> None:
    started = await handed(journal, "t1", LAPSED)
    outbox_before = rewinds_published(journal)
    if how == "reaper":
        # The claim window passed with no heartbeat and no write: the hand-off was
        # lost or its owner died before it arrived.
        (redriven,) = await reap(journal)
    else:
        # The owner did not acknowledge it: offered again at once.
        redriven_or_none = await journal.write(
            lambda tx: containment.reoffer(tx, started.turn, POLICY)
        )
        assert redriven_or_none is not None
        redriven = redriven_or_none
    turn = journal.turn("t1")
    assert (turn.attempts, turn.charged, turn.rewinds) == (0, 0, 0)
    assert not turn.owned and not turn.taken
    assert turn.handed == REOFFERED
    assert not redriven.rewound and not redriven.failed_at_cap
    assert redriven.turn.attempts == 0
    # No rewind was published: nothing had run.
    assert rewinds_published(journal) == outbox_before
    # Offered again, it is not offered a second time by a late acknowledgement.
    assert await journal.write(lambda tx: containment.reoffer(tx, started.turn, POLICY)) is None


async def test_a_stale_handoff_after_a_reoffer_is_fenced(journal: Journal) -> None:
    await handed(journal, "t1", LAPSED)
    await reap(journal)
    fence = Fence("t1", 0)
    # The late copy of the hand-off runs attempt 0 at the old owner: refused before
    # anyone claims the turn again ...
    with pytest.raises(StaleAttempt, match="offered again untaken"):
        await journal.events("t1", 0, "token")
    with pytest.raises(StaleAttempt):
        await journal.checkpoint("th-t1", "cp-1", fence)
    with pytest.raises(StaleAttempt):
        await heartbeat(journal, "t1", 0, OWNER)
    # ... and after: the claim of the turn offered again is a new attempt, charged to
    # nobody.
    claimed = await claim(journal, "t1", 0, OTHER)
    assert (claimed.attempts, claimed.charged, claimed.handed) == (1, 0, 0)
    assert (claimed.owner_replica, claimed.owner_incarnation) == OTHER
    with pytest.raises(StaleAttempt, match="attempt 0 was re-driven away"):
        await journal.events("t1", 0, "token")
    with pytest.raises(StaleAttempt):
        await heartbeat(journal, "t1", 0, OWNER)
    # The new owner writes.
    assert await journal.events("t1", 1, "token") == 1
    assert [e.attempt for e in transitions.load_events(journal.db.read_conn(), "t1", 0, 10)] == [1]


@pytest.mark.parametrize("first", ["write", "checkpoint", "heartbeat"])
async def test_the_owners_first_heartbeat_or_write_takes_it_and_a_crash_is_then_a_crash(
    journal: Journal, first: str
) -> None:
    await handed(journal, "t1", LAPSED)
    if first == "write":
        await journal.events("t1", 0, "token")
    elif first == "checkpoint":
        await journal.checkpoint("th-t1", "cp-1", Fence("t1", 0))
    else:
        await heartbeat(journal, "t1", 0, OWNER)
    assert journal.turn("t1").handed == 0
    assert journal.turn("t1").taken
    # Its lease lapses (the heartbeat's too): the owner took it and died, which the
    # reaper blames as it blames any crash.
    await journal.write(lambda tx: transitions.update_turn(tx, "t1", 0.0, lease_expires_at=0.0))
    (redriven,) = await reap(journal)
    turn = journal.turn("t1")
    assert redriven.rewound
    assert (turn.attempts, turn.charged) == (1, 1)


async def test_a_startup_redrive_of_the_same_replica_counts_no_crash(journal: Journal) -> None:
    """Restarted between the commit and the hand-off: the new incarnation takes the
    turn as it is (its older incarnation never took it), attempt and charge unspent."""
    await handed(journal, "t1")
    taken, elsewhere = await journal.write(
        lambda tx: containment.redrive_replica(
            tx, agent="agent", replica=OWNER[0], incarnation="incarnation-a2", policy=POLICY
        )
    )
    assert elsewhere == []
    (redriven,) = taken
    turn = journal.turn("t1")
    assert not redriven.rewound
    assert (turn.attempts, turn.charged, turn.handed) == (0, 0, 0)
    assert (turn.owner_replica, turn.owner_incarnation) == (OWNER[0], "incarnation-a2")


async def test_another_replica_cannot_claim_a_handed_turn(journal: Journal) -> None:
    await handed(journal, "t1")
    with pytest.raises(StaleAttempt, match="is owned by replica-a/incarnation-a"):
        await claim(journal, "t1", 0, OTHER)


async def test_on_a_thread_with_checkpoints_the_claim_says_the_thread_is_not_empty(
    journal: Journal,
) -> None:
    await journal.checkpoint("th-t1", "cp-0", None)
    started = await handed(journal, "t1")
    assert (started.checkpoint_id, started.thread_empty) == ("", False)
