"""A panel written to the durable-execution contract and nothing more: it knows the
five status words `running | parked | done | failed | unknown`, keeps waiting on
`running` and `parked`, and concludes on anything else. It asks an agent's
`responses/turnStatus` over NATS, as a seed panel does, so a test can show what such
a panel makes of every word an agent answers."""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client

from tests.support.agents import result

CONTRACT_WORDS = ("running", "parked", "done", "failed", "unknown")
KEEP_WAITING = ("running", "parked")


class ContractPanel:
    """Polls one turn's status every `interval` seconds until a word concludes it."""

    def __init__(self, nc: Client, agent: str, turn_id: str, interval: float = 0.05) -> None:
        self.nc = nc
        self.agent = agent
        self.turn_id = turn_id
        self.interval = interval
        self.words: list[str] = []
        self.answers: list[dict[str, Any]] = []
        self.concluded: str | None = None
        self._changed = asyncio.Condition()
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            answer = await result(
                self.nc, "responses/turnStatus", {"turn_id": self.turn_id}, agent=self.agent
            )
            word = answer["status"]
            async with self._changed:
                self.answers.append(answer)
                self.words.append(word)
                if word not in KEEP_WAITING:
                    # Not a word it keeps waiting on (even one it does not know): over.
                    self.concluded = word
                self._changed.notify_all()
            if self.concluded is not None:
                return
            await asyncio.sleep(self.interval)  # the panel's own polling cadence

    async def polled(self, times: int, timeout: float | None = None) -> None:
        """Until it has asked `times` more times (or concluded)."""
        async with self._changed:
            target = len(self.words) + times
            await asyncio.wait_for(
                self._changed.wait_for(
                    lambda: len(self.words) >= target or self.concluded is not None
                ),
                timeout,
            )

    async def conclusion(self, timeout: float | None = None) -> str:
        await asyncio.wait_for(asyncio.shield(self.task), timeout)
        assert self.concluded is not None
        return self.concluded

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
