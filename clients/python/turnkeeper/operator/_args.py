"""Argument types of the command line: each refuses bad input with a message argparse
prints beside the usage."""

from __future__ import annotations

import argparse
import json
from typing import Any

from turnkeeper.operator import _render as render
from turnkeeper.states import STATE_NAMES


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def page_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError("must be 1 to 1000")
    return value


def json_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from None


def state(text: str) -> str:
    state = text.upper().removeprefix(render.STATE_PREFIX)
    if state not in STATE_NAMES:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(STATE_NAMES)} (any case)")
    return state
