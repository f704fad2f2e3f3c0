"""The settled-events rule: `follow_settled` (engine/watch.py) yields a turn's events
only once no rewind can take them back, that is at or before the boundary of the
turn's newest checkpoint (journal/checkpoints.py records it, journal/redrive.py rewinds
to it), or all of them once the turn is parked or over. A LangGraph stream is made of
these (decision 210). The follower lives in the engine; its rule is the journal's
boundaries, so its white-box tests sit here with theirs."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest
from turnkeeper_server.engine.watch import TurnNotifier, follow_settled
from turnkeeper_server.journal import transitions
from turnkeeper_server.metrics import Metrics
from turnkeeper_server.records import EventRecord, Fence

from tests.journal.conftest import POLICY, Journal

pytestmark = [pytest.mark.both_backends, pytest.mark.timeout(60)]


def follower(
    journal: Journal, notifier: TurnNotifier, after_seq: int = 0
) -> AsyncGenerator[EventRecord]:
    return follow_settled(journal.db, notifier, Metrics(), "t1", after_seq)


def seen(events: list[EventRecord]) -> list[tuple[int, int, str]]:
    """(seq, attempt that wrote it, type) of each event."""
    return [(e.seq, e.attempt, e.type) for e in events]


async def test_events_past_the_boundary_wait_and_a_rewind_never_shows_them(
    journal: Journal,
) -> None:
    notifier = TurnNotifier()
    await journal.start("t1", "th1")
    await journal.events("t1", 0, "step", "token", "token")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    await journal.events("t1", 0, "step", "token")  # seq 4-5, past the boundary (3)
    follow = follower(journal, notifier)
    first = [await anext(follow) for _ in range(3)]
    assert seen(first) == [(1, 0, "step"), (2, 0, "token"), (3, 0, "token")]
    # Attempt 0 dies: its seq 4-5 are rewound away, attempt 1 writes its own and ends.
    await journal.redrive("t1")
    await journal.events("t1", 1, "step", "token")
    await journal.checkpoint("th1", "cp-2", Fence("t1", 1))
    await journal.write(
        lambda tx: transitions.finish_turn(
            tx, turn_id="t1", attempt=1, failed=False, error="", events=[], policy=POLICY
        )
    )
    notifier.notify("t1")
    rest = [event async for event in follow]
    # The follower read seq 4-5 of attempt 0 with its first page and held them back.
    assert seen(rest) == [(4, 1, "step"), (5, 1, "token"), (6, 1, "turn.done")]


async def test_settled_events_come_in_seq_order_from_after_seq(journal: Journal) -> None:
    notifier = TurnNotifier()
    await journal.start("t1", "th1")
    await journal.events("t1", 0, *(["token"] * 7))
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    await journal.write(
        lambda tx: transitions.finish_turn(
            tx, turn_id="t1", attempt=0, failed=False, error="", events=[], policy=POLICY
        )
    )
    events = [event async for event in follower(journal, notifier, after_seq=2)]
    assert [e.seq for e in events] == [3, 4, 5, 6, 7, 8]
    assert events[-1].type == "turn.done"


async def test_a_parked_turns_events_are_all_out_and_the_follow_ends(journal: Journal) -> None:
    notifier = TurnNotifier()
    await journal.start("t1", "th1")
    await journal.events("t1", 0, "step")
    await journal.checkpoint("th1", "cp-1", Fence("t1", 0))
    await journal.write(
        lambda tx: transitions.park_turn(
            tx,
            turn_id="t1",
            attempt=0,
            interrupt_json="{}",
            events=[(2, "token", "{}"), (3, "interrupt", "{}")],
            policy=POLICY,
        )
    )
    # Past the boundary (1), yet parked: nothing can rewind them, and a LangGraph run
    # ends at its interrupt.
    events = [event async for event in follower(journal, notifier)]
    assert [(e.seq, e.type) for e in events] == [(1, "step"), (2, "token"), (3, "interrupt")]
