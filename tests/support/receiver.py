"""A receiver of effects, run as its own process: a small HTTP service that counts
every execution by idempotency key, as a payment API would see them, and applies
each key once (a repeat is answered with the first result).

    python -m tests.support.receiver [LOG]   prints "listening <port>" once it serves

POST /charge with an `Idempotency-Key` header and a JSON body executes it; GET
/counts answers {"executions": {key: n}, "applied": {key: body}}.

With a LOG path it also writes one line per fact, before it answers, for a harness
that checks more than counts (the fault campaign, tests/faults/invariants.py); the
body's ``turn_id``, ``attempt`` and ``entry`` say which call it was:

- ``exec <key> <turn_id> <attempt> <entry>``: an execution arrived;
- ``apply <key> <turn_id> <entry> <charge>``: the first execution of that key, applied.

:func:`read` turns such a log into what the campaign checks.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_lock = threading.Lock()
_executions: dict[str, int] = {}
_applied: dict[str, Any] = {}
_log: int | None = None


def _note(line: str) -> None:
    if _log is not None:
        os.write(_log, (line + "\n").encode())


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        key = self.headers.get("Idempotency-Key", "")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if not key:
            self._answer(400, {"error": "an Idempotency-Key header is required"})
            return
        call = " ".join(str(body.get(k, "-")) for k in ("turn_id", "attempt", "entry"))
        with _lock:
            _executions[key] = _executions.get(key, 0) + 1
            _note(f"exec {key} {call}")
            first = key not in _applied
            applied = _applied.setdefault(key, {"charge": f"ch-{len(_applied) + 1}", **body})
            if first:
                turn_id, _, entry = call.split(" ")
                _note(f"apply {key} {turn_id} {entry} {applied['charge']}")
        self._answer(200, applied)

    def do_GET(self) -> None:
        with _lock:
            self._answer(200, {"executions": dict(_executions), "applied": dict(_applied)})

    def _answer(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the counts, not a log."""


@dataclass
class ReceiverLog:
    """What a receiver with a LOG saw: executions by key (turn, attempt, entry), and
    the keys applied for each logical call (turn, entry)."""

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
            case ["apply", key, turn_id, entry, _charge]:
                seen.applied[(turn_id, entry)].append(key)
            case _:
                pass  # a line cut by the end of the run: nothing to check
    return seen


def main() -> None:
    global _log
    if len(sys.argv) > 1:
        _log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
