"""Durations on the command line (`90s`, `15m`, `2h`, `7d`, or plain seconds), and
the serve flags that take them: the turn deadlines' defaults and the two retentions."""

from __future__ import annotations

import argparse
import os
import re

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in `text`; 0 means "none" where a flag says so."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise argparse.ArgumentTypeError(
            f"not a duration: {text!r} (a number with an optional unit s, m, h or d: 90s, 15m, 7d)"
        )
    return float(match.group(1)) * _UNITS[match.group(2)]


def format_duration(seconds: float) -> str:
    """`seconds` in the largest unit that divides it (`1h`, `90s`); 0 is `off`."""
    if seconds == 0:
        return "off"
    for unit in ("d", "h", "m"):
        if seconds % _UNITS[unit] == 0:
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


def _duration_argument(
    parser: argparse.ArgumentParser, flag: str, env: str, default: float, help: str
) -> None:
    """A DURATION flag whose default comes from `env`, else `default` (seconds)."""
    given = os.environ.get(env)
    parser.add_argument(
        flag,
        type=parse_duration,
        default=parse_duration(given) if given else default,
        metavar="DURATION",
        help=f"{help}; env {env}; default {format_duration(default)}",
    )


def add_lifecycle_arguments(
    parser: argparse.ArgumentParser, *, max_run_time: float, park_expiry: float
) -> None:
    """The turn deadlines' flags, with the service's defaults (config.Settings)."""
    _duration_argument(
        parser,
        "--max-run-time",
        "TURNKEEPER_MAX_RUN_TIME",
        max_run_time,
        "default longest a turn may run between a start or resume and its next park; "
        "the reaper fails it after (0: no limit)",
    )
    _duration_argument(
        parser,
        "--park-expiry",
        "TURNKEEPER_PARK_EXPIRY",
        park_expiry,
        "default longest a turn may wait PARKED for ResumeDetached; the reaper fails "
        "it after (0: no limit, a parked turn waits for its resume)",
    )
    _duration_argument(
        parser,
        "--retention",
        "TURNKEEPER_RETENTION",
        0.0,
        "delete finished turns' events and prune their threads' checkpoints to the "
        "latest this long after the turn ended (0: keep everything)",
    )
    _duration_argument(
        parser,
        "--turn-retention",
        "TURNKEEPER_TURN_RETENTION",
        0.0,
        "delete finished turns themselves (their rows, events, outbox rows and "
        "boundaries) this long after they ended, and a thread's checkpoints once its last "
        "turn goes; TurnStatus then answers UNKNOWN and a StartTurn with the same turn_id "
        "starts a new turn. At least --retention (0: keep turn rows)",
    )
