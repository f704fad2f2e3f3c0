"""The receiver the campaign's agents act on: a small HTTP service of the test suite,
in a process of its own (never killed by the campaign), that counts every execution
of an effect and applies each idempotency key once, as a payment API that takes an
``Idempotency-Key`` does: a repeated key answers the first receipt and applies
nothing. Run as ``python -m tests.faults.receiver LOG`` (cwd: the repo); it prints
``listening <port>`` on 127.0.0.1.

``POST /apply`` with ``{"key", "turn_id", "attempt", "entry"}`` answers
``{"receipt", "applied"}``. The log, one line per fact, written before the answer:

- ``exec <key> <turn_id> <attempt> <entry>``: an execution arrived;
- ``apply <key> <turn_id> <entry> <receipt>``: the first execution of that key,
  applied.

:func:`read` turns the log into what the campaign's invariants check.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web


class Receiver:
    def __init__(self, log: Path) -> None:
        self._fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.receipts: dict[str, str] = {}

    def note(self, line: str) -> None:
        os.write(self._fd, (line + "\n").encode())

    async def apply(self, request: web.Request) -> web.Response:
        body = await request.json()
        key, turn_id, entry = str(body["key"]), str(body["turn_id"]), str(body["entry"])
        self.note(f"exec {key} {turn_id} {int(body['attempt'])} {entry}")
        receipt = self.receipts.get(key)
        applied = receipt is None
        if receipt is None:
            receipt = self.receipts[key] = f"r{len(self.receipts) + 1}"
            self.note(f"apply {key} {turn_id} {entry} {receipt}")
        return web.json_response({"receipt": receipt, "applied": applied})


async def serve(log: Path) -> None:
    app = web.Application()
    app.router.add_post("/apply", Receiver(log).apply)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"listening {port}", flush=True)
    await asyncio.Event().wait()  # until killed


@dataclass
class ReceiverLog:
    """What the receiver saw: executions by key (turn, attempt, entry), and the keys
    applied for each logical call (turn, entry)."""

    executions: defaultdict[str, list[tuple[str, int, str]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    applied: defaultdict[tuple[str, str], list[str]] = field(
        default_factory=lambda: defaultdict(list)
    )


def read(log: Path) -> ReceiverLog:
    seen = ReceiverLog()
    if not log.exists():
        return seen
    for line in log.read_text().splitlines():
        match line.split():
            case ["exec", key, turn_id, attempt, entry]:
                seen.executions[key].append((turn_id, int(attempt), entry))
            case ["apply", key, turn_id, entry, _receipt]:
                seen.applied[(turn_id, entry)].append(key)
            case _:
                pass  # a line cut by the end of the run: nothing to check
    return seen


if __name__ == "__main__":
    asyncio.run(serve(Path(sys.argv[1])))
