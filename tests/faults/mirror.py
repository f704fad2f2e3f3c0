"""What the service published on NATS, as one subscriber that never misses a
message saw it.

The service reaches NATS through a :class:`~tests.support.relay.Relay` the
campaign controls, so around a NATS restart it is cut off first and let back in
last (see :meth:`tests.faults.cluster.Cluster.restart_nats`): every message the
outbox publishes finds this subscriber connected. Delivery is at-least-once (an
unconfirmed batch is published again), so messages are de-duplicated by their
``Nats-Msg-Id`` (the outbox row id), keeping the first copy.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

PROBE_HEADER = "Turnkeeper-Fault-Probe"
PREFIX = "vystak"


@dataclass
class Mirror:
    # Per turn, in arrival order: ("event" | "rewind", payload, Nats-Msg-Id).
    by_turn: dict[str, list[tuple[str, dict[str, Any], int]]] = field(default_factory=dict)
    # Nats-Msg-Id -> a digest of the first copy's subject and payload.
    ids: dict[int, bytes] = field(default_factory=dict)
    max_id: int = 0
    duplicates: int = 0
    # Copies of an id with another subject or payload: an outbox id used twice.
    reused: list[str] = field(default_factory=list)
    # Replay a turn in outbox-id order rather than arrival order: with several
    # replicas draining one outbox, two publishers' batches may reach NATS
    # interleaved, while a turn's ids follow its commit order (the turn's row lock),
    # so a subscriber orders by id (or seq).
    order_by_id: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _probe: str = ""
    _probed: asyncio.Event = field(default_factory=asyncio.Event)

    async def handler(self, msg: Msg) -> None:
        headers = msg.headers or {}
        if PROBE_HEADER in headers:
            if headers[PROBE_HEADER] == self._probe:
                self._probed.set()
            return
        msg_id = int(headers.get("Nats-Msg-Id", "0"))
        copy = hashlib.sha1(msg.subject.encode() + b"\0" + msg.data).digest()
        first = self.ids.get(msg_id)
        if first is not None:
            self.duplicates += 1
            if first != copy:
                self.reused.append(
                    f"outbox id {msg_id} came again with other content: {msg.data!r}"
                )
            return
        self.ids[msg_id] = copy
        self.max_id = max(self.max_id, msg_id)
        payload = json.loads(msg.data)
        kind = "rewind" if msg.subject == f"{PREFIX}.turn.rewind" else "event"
        self.by_turn.setdefault(payload["turn_id"], []).append((kind, payload, msg_id))
        self._changed.set()

    async def subscribe(self, nc: Client) -> None:
        await nc.subscribe(f"{PREFIX}.turn.>", cb=self.handler)
        await self.routed(nc)

    async def routed(self, nc: Client, timeout: float = 30.0) -> None:
        """Until a probe published now comes back through the subscription: the
        subscription is routed, and everything the server had accepted from any
        publisher before the probe has been delivered to us."""
        self._probe = uuid.uuid4().hex
        self._probed.clear()

        async def loop() -> None:
            while not self._probed.is_set():
                await nc.publish(f"{PREFIX}.turn.probe", b"", headers={PROBE_HEADER: self._probe})
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._probed.wait(), 0.2)

        await asyncio.wait_for(loop(), timeout)

    async def wait_for(self, predicate: Any, timeout: float) -> bool:
        """Until ``predicate()`` holds; False if it did not within ``timeout``."""

        async def loop() -> None:
            while not predicate():
                self._changed.clear()
                await self._changed.wait()

        try:
            await asyncio.wait_for(loop(), timeout)
        except TimeoutError:
            return False
        return True

    def rewinds(self, turn_id: str) -> list[tuple[int, int]]:
        """(seq, attempt) of each rewind of the turn, in order."""
        messages = self.by_turn.get(turn_id, [])
        if self.order_by_id:
            messages = sorted(messages, key=lambda m: m[2])
        return [(int(p["seq"]), int(p["attempt"])) for kind, p, _ in messages if kind == "rewind"]

    def replay(self, turn_id: str) -> tuple[list[tuple[int, int, str, str]], list[str]]:
        """Apply the turn's messages as a NATS consumer does (a rewind truncates to
        its seq). Returns the resulting (seq, attempt, type, data) events and the
        problems met: a gap, a repeat, a rewind past what was published, an event
        of an attempt older than the last rewind's."""
        shown: list[tuple[int, int, str, str]] = []
        problems: list[str] = []
        floor, last_id = 0, 0
        messages = self.by_turn.get(turn_id, [])
        if self.order_by_id:
            messages = sorted(messages, key=lambda m: m[2])
        for kind, p, msg_id in messages:
            if kind == "rewind":
                seq, floor = int(p["seq"]), int(p["attempt"])
                if seq > len(shown):
                    problems.append(f"rewind to seq {seq} but only {len(shown)} were published")
                del shown[seq:]
                continue
            seq, attempt = int(p["seq"]), int(p["attempt"])
            if seq != len(shown) + 1:
                problems.append(
                    f"event seq {seq} (outbox id {msg_id}) after seq {len(shown)} "
                    f"(outbox id {last_id}): a gap or a repeat"
                )
            last_id = msg_id
            if attempt < floor:
                problems.append(f"event seq {seq} of attempt {attempt} after a rewind to {floor}")
            shown.append((seq, attempt, str(p["type"]), json.dumps(p["data"], sort_keys=True)))
        return shown, problems
