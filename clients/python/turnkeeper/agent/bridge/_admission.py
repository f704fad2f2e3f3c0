"""Admission: at most ``max_turns`` executions of one bridge run at once.

A replica that starts every turn it is handed starts work that cannot finish on a
saturated machine: each turn gets a sliver of the CPU, every one of them slows, and
deadlines (leases, checkpoint streams, clients) lapse for all. Past the limit a turn
waits instead, and waits where it can be seen:

- a turn not yet owned by this replica (a new ``responses/create`` while every slot
  is taken, a hand-off from the service) is left unowned in the journal, RUNNING with
  no executor, and this replica claims it (ClaimTurn) when a slot frees. The service
  says why it waits (Turn.detail, from the replicas' announcements: every live replica
  is full) and the LangGraph API shows the run ``pending``. While it waits, the
  service offers it again every claim window, so a replica of the agent that has a
  free slot takes it first; nothing ran, so nothing is spent and nothing rewound.
- a turn already owned here (the startup Redrive hands back every orphan at once)
  keeps its lease, renewed by the lease thread, and runs when a slot frees.

A waiting turn is never dropped and never failed for waiting. The slots go first to
owned executions (they hold a lease), then to claims in the order they came.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Final

log = logging.getLogger(__name__)

#: Executions one bridge runs at once unless told otherwise (``--max-turns``,
#: ``TURNKEEPER_MAX_TURNS``): enough for a replica's usual share of concurrent runs,
#: few enough that a burst waits instead of starving the turns already running.
DEFAULT_MAX_TURNS: Final = 64


class Admission:
    """Slots for executions, and the claims waiting for one. ``limit`` 0: no limit."""

    def __init__(self, limit: int = DEFAULT_MAX_TURNS) -> None:
        if limit < 0:
            raise ValueError(f"max_turns {limit}: 0 (no limit) or more")
        self.limit = limit
        self.in_use = 0
        # Owned executions waiting for a slot, first come first served.
        self._owned: deque[asyncio.Future[None]] = deque()
        # Turns to claim when a slot frees: turn_id -> (attempt, reason).
        self._claims: OrderedDict[str, tuple[int, str]] = OrderedDict()
        #: Called with the claim to make, holding a slot for it (the runtime claims).
        self.on_claim: Callable[[str, int, str], None] | None = None
        #: Called when the bridge turns full or free again (it says so to the service).
        self.on_full: Callable[[bool], None] | None = None
        self._was_full = False

    @property
    def full(self) -> bool:
        return self.limit > 0 and self.in_use >= self.limit

    @property
    def waiting(self) -> int:
        return len(self._owned) + len(self._claims)

    def try_take(self) -> bool:
        """A slot now, or False (nothing waits for it)."""
        if self.full or self._owned:
            return False
        self._take()
        return True

    async def take(self) -> None:
        """A slot for an owned execution, once one is free."""
        if self.try_take():
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._owned.append(waiter)
        self._changed()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give_back()  # handed a slot in the same instant: pass it on
            elif waiter in self._owned:
                self._owned.remove(waiter)
                self._changed()
            raise

    def wait_to_claim(self, turn_id: str, attempt: int, reason: str) -> None:
        """Claim the turn when a slot frees (a newer attempt replaces an older one)."""
        known = self._claims.get(turn_id)
        if known is not None and known[0] >= attempt:
            return
        self._claims[turn_id] = (attempt, reason)
        if known is not None:
            return  # offered again (every claim window): said already
        log.info(
            "turn_id=%s attempt=%d: waits for a free slot (%d running, --max-turns %d)",
            turn_id,
            attempt,
            self.in_use,
            self.limit,
        )
        self._changed()

    def forget(self, turn_id: str) -> None:
        """A waiting claim no longer wanted (the turn runs here already)."""
        if self._claims.pop(turn_id, None) is not None:
            self._changed()

    def give_back(self) -> None:
        """A slot freed: to the next owned execution, else the next claim."""
        if self.in_use <= 0:
            # A slot given back twice would let one turn more run than the limit.
            raise RuntimeError("a slot given back that was never taken")
        self.in_use -= 1
        while self._owned:
            waiter = self._owned.popleft()
            if not waiter.done():
                self._take()
                waiter.set_result(None)
                self._changed()
                return
        if self._claims and self.on_claim is not None and not self.full:
            turn_id, (attempt, reason) = self._claims.popitem(last=False)
            self._take()
            self.on_claim(turn_id, attempt, reason)
        self._changed()

    def _take(self) -> None:
        self.in_use += 1

    def _changed(self) -> None:
        full = self.full or self.waiting > 0
        if full != self._was_full:
            self._was_full = full
            if self.on_full is not None:
                self.on_full(full)
