"""A webhook receiver, run as its own process: counts every delivery by its
``webhook-id``, applies each id once (a repeat is acknowledged, not applied again),
and verifies each signature with the secret it is given (Standard Webhooks'
scheme, computed here on its own, not with the service's code).

    python -m tests.support.webhook_receiver SECRET   prints "listening <port>"

POST any path delivers. Its query may ask for trouble: ``fail=N`` answers 500 to
the first N deliveries of an id; ``hold=1`` answers the first delivery of an id only
once GET /release is called (it is applied on arrival, as a receiver that commits
before answering does). GET /counts answers {"deliveries": {id: n}, "applied":
{id: body}, "bad_signatures": n, "times": {id: [arrival, ...]}}; GET
/wait?applied=N answers it once N ids are applied, /wait?seen=ID&n=N once ID
arrived N times (1 by default; long polls: the arrival is the event).

A test starts it with :func:`running` and talks to it through :class:`Receiver`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import sys
import threading
import time
import urllib.request
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.procs import listener

# The secret the tests' services sign with (their --webhook-secret-file holds it).
SECRET = "turnkeeper-test-webhook-secret-0123"

_changed = threading.Condition()
_deliveries: dict[str, int] = {}
_applied: dict[str, Any] = {}
_times: dict[str, list[float]] = {}
_bad = 0
_secret = b""
_released = threading.Event()


def _expected(msg_id: str, timestamp: str, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(_secret, signed, hashlib.sha256).digest()).decode()


def _state() -> dict[str, Any]:
    return {
        "deliveries": dict(_deliveries),
        "applied": dict(_applied),
        "bad_signatures": _bad,
        "times": {k: list(v) for k, v in _times.items()},
    }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        global _bad
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        msg_id = self.headers.get("webhook-id", "")
        timestamp = self.headers.get("webhook-timestamp", "")
        given = [s.partition(",")[2] for s in self.headers.get("webhook-signature", "").split()]
        query = parse_qs(urlsplit(self.path).query)
        with _changed:
            n = _deliveries[msg_id] = _deliveries.get(msg_id, 0) + 1
            _times.setdefault(msg_id, []).append(time.time())
            signed = any(hmac.compare_digest(g, _expected(msg_id, timestamp, body)) for g in given)
            if not signed:
                _bad += 1
            fail = int(query.get("fail", ["0"])[0])
            if signed and n > fail and msg_id not in _applied:
                _applied[msg_id] = json.loads(body)
            _changed.notify_all()
        if n <= fail:
            self._answer(500, {"error": "failing on purpose"})
            return
        if query.get("hold") == ["1"] and n == 1:
            _released.wait()
        self._answer(200 if signed else 401, {"ok": signed})

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = parse_qs(parts.query)
        if parts.path == "/release":
            _released.set()
        if parts.path == "/wait" and "seen" in query:
            with _changed:
                times = int(query.get("n", ["1"])[0])
                _changed.wait_for(lambda: _deliveries.get(query["seen"][0], 0) >= times)
        elif parts.path == "/wait":
            want = int(query.get("applied", ["1"])[0])
            with _changed:
                _changed.wait_for(lambda: len(_applied) >= want)
        with _changed:
            self._answer(200, _state())

    def _answer(self, status: int, payload: Any) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the service went away mid-answer (a SIGKILL): the test's point

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the test reads the counts."""


def service_flags(secret_file: Path) -> list[str]:
    """A service process's flags that send webhooks, signed with the secret in
    `secret_file`, to a receiver on loopback: retried soon and given up on soon, as
    a test wants."""
    return [
        "--webhook-secret-file",
        str(secret_file),
        "--webhook-allow",
        "127.0.0.1",
        "--webhook-retry-base",
        "0.2",
        "--webhook-timeout",
        "2",
    ]


class Receiver:
    """A test's handle to the receiver process at `url`."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def get(self, path: str) -> dict[str, Any]:
        def fetch() -> dict[str, Any]:
            with urllib.request.urlopen(self.url + path) as answer:
                found: dict[str, Any] = json.load(answer)
                return found

        return await asyncio.to_thread(fetch)

    async def wait_applied(self, n: int) -> dict[str, Any]:
        """Once n ids are applied (the receiver answers then: no polling here)."""
        return await self.get(f"/wait?applied={n}")


@contextlib.asynccontextmanager
async def running(secret: str = SECRET) -> AsyncIterator[Receiver]:
    """The receiver process, verifying with `secret`, for the block."""
    async with listener("tests.support.webhook_receiver", secret) as url:
        yield Receiver(url)


def main() -> None:
    global _secret
    _secret = sys.argv[1].encode()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
