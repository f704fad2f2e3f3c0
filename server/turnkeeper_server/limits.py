"""Request validation: ids, sizes and counts, each refusal naming its limit."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from turnkeeper_server.errors import InvalidArgument

# Printable ASCII without spaces: safe in NATS subjects' payloads, logs and URLs.
_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]+$")
# Agent names become a NATS subject token: no dots, no wildcards.
_AGENT = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True)
class Limits:
    max_id_length: int = 256
    max_input_bytes: int = 1 << 20
    max_resume_bytes: int = 256 << 10
    max_json_depth: int = 64
    max_event_bytes: int = 256 << 10
    max_events_per_batch: int = 1000
    max_checkpoint_bytes: int = 32 << 20
    max_writes_per_call: int = 1000
    max_page_size: int = 1000
    max_error_bytes: int = 16 << 10


DEFAULT_LIMITS = Limits()


def check_id(name: str, value: str, limits: Limits = DEFAULT_LIMITS) -> str:
    if not value:
        raise InvalidArgument(f"{name} is required")
    if len(value) > limits.max_id_length:
        raise InvalidArgument(
            f"{name} is {len(value)} characters; the limit is {limits.max_id_length}"
        )
    if not _ID.match(value):
        raise InvalidArgument(f"{name} {value[:64]!r} has characters outside [A-Za-z0-9._:@/+=-]")
    return value


def check_agent(value: str, limits: Limits = DEFAULT_LIMITS) -> str:
    check_id("agent", value, limits)
    if not _AGENT.match(value):
        raise InvalidArgument(
            f"agent {value[:64]!r} must be letters, digits, '_' or '-' (it names a NATS subject)"
        )
    return value


def check_optional_id(name: str, value: str, limits: Limits = DEFAULT_LIMITS) -> str:
    return check_id(name, value, limits) if value else value


def check_size(name: str, size: int, limit: int) -> None:
    if size > limit:
        raise InvalidArgument(f"{name} is {size} bytes; the limit is {limit}")


def check_depth(name: str, value: Any, limit: int) -> None:
    """Refuse JSON nested deeper than `limit` (iteratively: no recursion to blow)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise InvalidArgument(f"{name} is nested deeper than {limit} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def check_json_text(name: str, text: str, limit: int) -> None:
    check_size(name, len(text.encode()), limit)
    try:
        json.loads(text)
    except ValueError as exc:
        raise InvalidArgument(f"{name} is not valid JSON: {exc}") from None


def page_size(requested: int, default: int, limits: Limits = DEFAULT_LIMITS) -> int:
    if requested < 0:
        raise InvalidArgument("page_size must not be negative")
    if requested > limits.max_page_size:
        raise InvalidArgument(f"page_size {requested} is over the limit of {limits.max_page_size}")
    return requested or default
