"""A receiver of effects, run as its own process: a small HTTP service that counts
every execution by idempotency key, as a payment API would see them, and applies
each key once (a repeat is answered with the first result).

    python -m tests.support.receiver      prints "listening <port>" once it serves

POST /charge with an `Idempotency-Key` header and a JSON body executes it; GET
/counts answers {"executions": {key: n}, "applied": {key: body}}.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_lock = threading.Lock()
_executions: dict[str, int] = {}
_applied: dict[str, Any] = {}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        key = self.headers.get("Idempotency-Key", "")
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if not key:
            self._answer(400, {"error": "an Idempotency-Key header is required"})
            return
        with _lock:
            _executions[key] = _executions.get(key, 0) + 1
            applied = _applied.setdefault(key, {"charge": f"ch-{len(_applied) + 1}", **body})
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


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
