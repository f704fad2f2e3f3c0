"""Every default the docs state is the code's default: read from both, compared.

The docs name a flag's default in a few shapes: ``--flag`` (``ENV``, 15) in a list of
settings, ``--flag``, 1 hour by default, in a table cell, or a table row whose last
cell ends with the default (; 10 s). Each one found is compared with the default of
that flag in ``turnkeeper serve``'s own parser (built with no TURNKEEPER_* variables
set), so a default changed in one place and not the other fails here. The panel's
follow deadline and the lease and claim windows, stated in prose, are compared with
the settings and the follower they come from.

And the contract's rule behind one of them: a parked turn has no expiry unless an
operator sets one (a turn waiting for a human waits).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from grpc import aio
from turnkeeper.panel.follower import FollowOptions
from turnkeeper.v1 import turns_pb2 as pb
from turnkeeper.v1 import turns_pb2_grpc
from turnkeeper_server import main as serve
from turnkeeper_server.config import Settings

from tests.support.service import ServiceFactory
from tests.support.turns import start, value

ROOT = Path(__file__).resolve().parents[2]
DOCS = [
    ROOT / "docs" / name for name in ("durable-execution.md", "operators.md", "architecture.md")
]

_UNITS = {
    "s": 1.0,
    "sec": 1.0,
    "second": 1.0,
    "seconds": 1.0,
    "m": 60.0,
    "min": 60.0,
    "minute": 60.0,
    "minutes": 60.0,
    "h": 3600.0,
    "hour": 3600.0,
    "hours": 3600.0,
    "d": 86400.0,
    "day": 86400.0,
    "days": 86400.0,
}
_AMOUNT = re.compile(r"^(\d+(?:\.\d+)?)\s*([a-z]*)$")
_ADDRESS = re.compile(r"^[\w.-]+:\d+$")

# `--flag` (`ENV`, 15) or `--flag D` (3) or `--flag` re-drives (3): the parenthesis.
IN_PARENS = re.compile(r"`(--[a-z][a-z-]*)(?: [A-Z]+)?`(?: [a-z-]+)? \(([^()]*)\)")
# (`--flag`, 1 h, or the turn's own ...): the flag leads a parenthesis.
LEADING = re.compile(r"\(`(--[a-z][a-z-]*)`, ([^,;()]+)")
# `--flag`, 1 hour by default
BY_DEFAULT = re.compile(r"`(--[a-z][a-z-]*)`,? ([\w .]+?) by default")
# | `--flag D` | `ENV` | what it does; 10 s |
TABLE_ROW = re.compile(r"^\| `(--[a-z][a-z-]*)[^`]*`.*; ([^;|]+?) \|\s*$", re.MULTILINE)
# Defaults stated in prose, with what they must equal.
PROSE = {
    "lease": re.compile(r"lease \((\d+ s)\)"),
    "claim window": re.compile(r"claim window \((\d+ s)\)"),
    "panel deadline": re.compile(r"deadline \((\d+ minutes) by default\)"),
}


def parse_value(text: str) -> float | str | None:
    """A stated default as seconds, a number or an address; None: not a default."""
    text = text.strip().strip("`").strip()
    text = text.removeprefix("default ").strip().strip("`")
    if text in ("off", "none", "0"):
        return 0.0
    if _ADDRESS.match(text):
        return text
    match = _AMOUNT.match(text)
    if match is None:
        return None
    amount, unit = float(match.group(1)), match.group(2)
    if unit == "":
        return amount
    return amount * _UNITS[unit] if unit in _UNITS else None


def stated_defaults() -> list[tuple[str, str, float | str]]:
    """(where, flag, default) for every default the docs state for a flag."""
    found: list[tuple[str, str, float | str]] = []
    for doc in DOCS:
        text = doc.read_text()
        flat = re.sub(r"\s*\n\s*", " ", text)
        for match in IN_PARENS.finditer(flat):
            flag, inside = match.groups()
            for part in re.split(r"[,;]", inside):
                if re.search(r"`[A-Z][A-Z0-9_]+`|\benv\b", part):
                    continue  # the environment variable, not the default
                stated = parse_value(part)
                if stated is not None:
                    found.append((f"{doc.name}: {match.group(0)}", flag, stated))
                break
        for match in LEADING.finditer(flat):
            stated = parse_value(match.group(2))
            if stated is not None:
                found.append((f"{doc.name}: {match.group(0)}", match.group(1), stated))
        for match in BY_DEFAULT.finditer(flat):
            stated = parse_value(match.group(2))
            if stated is not None:
                found.append((f"{doc.name}: {match.group(0)}", match.group(1), stated))
        for match in TABLE_ROW.finditer(text):
            stated = parse_value(match.group(2))
            if stated is not None:
                found.append((f"{doc.name}: {match.group(0)}", match.group(1), stated))
    return found


@pytest.fixture
def code_defaults(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """Every `turnkeeper serve` flag's default, with no setting in the environment."""
    import os

    for name in list(os.environ):
        if name.startswith(("TURNKEEPER_", "VYSTAK_")) or name == "NATS_URL":
            monkeypatch.delenv(name)
    parser = argparse.ArgumentParser()
    serve.add_serve_arguments(parser)
    defaults: dict[str, object] = {}
    for action in parser._actions:
        for flag in action.option_strings:
            defaults[flag] = action.default
    defaults["--http-port"] = serve.DEFAULT_HTTP_PORT
    return defaults


def test_every_default_the_docs_state_is_the_codes(code_defaults: dict[str, object]) -> None:
    stated = stated_defaults()
    checked = {flag for _, flag, _ in stated if flag in code_defaults}
    # The parser must find the defaults the contract's docs are about, or it
    # would pass by checking nothing.
    assert {
        "--max-run-time",
        "--park-expiry",
        "--max-redrives",
        "--lease-seconds",
        "--retention",
        "--turn-retention",
        "--listen",
        "--http-header-timeout",
        "--grpc-idle-timeout",
    } <= checked, checked
    wrong = [
        f"{where} says {value!r}, the code's default is {code_defaults[flag]!r}"
        for where, flag, value in stated
        if flag in code_defaults and _differs(value, code_defaults[flag])
    ]
    assert not wrong, "\n".join(wrong)


def test_the_defaults_stated_in_prose_are_the_codes() -> None:
    settings = Settings(turns_path=Path("t.db"), sessions_path=Path("s.db"))
    expected = {
        "lease": settings.lease_seconds,
        "claim window": settings.claim_seconds,
        "panel deadline": FollowOptions().deadline,
    }
    seen: set[str] = set()
    for doc in DOCS:
        flat = re.sub(r"\s*\n\s*", " ", doc.read_text())
        for name, pattern in PROSE.items():
            for match in pattern.finditer(flat):
                seen.add(name)
                assert parse_value(match.group(1)) == expected[name], (doc.name, match.group(0))
    assert seen == set(PROSE)


def _differs(stated: float | str, default: object) -> bool:
    if isinstance(stated, str):
        return stated != default
    if default is None:
        return stated != 0.0
    return not isinstance(default, int | float) or float(default) != stated


async def test_a_turn_parked_under_the_default_settings_has_no_expiry(
    make_service: ServiceFactory,
) -> None:
    # The tests' settings change the lease and claim windows, never the deadlines.
    service = await make_service()
    async with aio.insecure_channel(service.address) as channel:
        stub = turns_pb2_grpc.TurnServiceStub(channel)
        started = await start(stub, "t-park", "th-park")
        parked = await stub.ParkTurn(
            pb.ParkTurnRequest(turn_id="t-park", attempt=0, interrupt=value({"ask": "ok?"}))
        )
    assert parked.turn.state == pb.TURN_STATE_PARKED
    # Waits for a human as long as it takes: no park deadline unless one is set.
    assert not parked.turn.HasField("park_deadline"), parked.turn.park_deadline
    # The run deadline stays on by default: a running turn is a process at work.
    assert started.turn.HasField("run_deadline")
