"""Request validation: ids, sizes and counts, each refusal naming its limit.

Every limit is a field of `Limits` (Settings.limits). A request over a size or
count limit is INVALID_ARGUMENT; a client over a quota of open resources (WatchTurn
streams) is RESOURCE_EXHAUSTED. Each message names the limit it hit.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

from turnkeeper_server.errors import InvalidArgument, ResourceExhausted

# Printable ASCII without spaces: safe in NATS subjects' payloads, logs and URLs.
_ID = re.compile(r"^[A-Za-z0-9._:@/+=-]+$")
# A turn id is the last token of `<prefix>.turn.events.<turn_id>`: no dot, so a
# subscriber's `*` wildcard matches every turn.
_TURN_ID = re.compile(r"^[A-Za-z0-9_:@/+=-]+$")
# Thread ids are LangGraph's, and SqliteSaver takes any text: only characters that
# forge what a reader sees are refused, so threads stay portable: control characters
# (C0, DEL, C1), the line and paragraph separators, and the bidi controls that
# reorder a log line or a page (decision 188).
_THREAD_ID = re.compile(
    r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]+$"
)
_PATTERNS = {
    "turn_id": (_TURN_ID, "[A-Za-z0-9_:@/+=-] (no '.': it ends a NATS subject)"),
    "fence.turn_id": (_TURN_ID, "[A-Za-z0-9_:@/+=-] (no '.': it ends a NATS subject)"),
    "thread_id": (
        _THREAD_ID,
        "printable characters (no control characters, line separators or bidi controls)",
    ),
}
# Agent names become a NATS subject token: no dots, no wildcards.
_AGENT = re.compile(r"^[A-Za-z0-9_-]+$")
# A graph's shape (journal/versions.py, and in announcements, messaging/directory.py)
# is a few kilobytes; a bigger one is not a graph description.
MAX_SHAPE_BYTES: Final = 1 << 20


@dataclass(frozen=True)
class Limits:
    max_id_length: int = 256
    max_input_bytes: int = 1 << 20
    max_resume_bytes: int = 256 << 10
    # Below protobuf's own nesting limit (a JSON level is two message levels).
    max_json_depth: int = 32
    max_event_bytes: int = 256 << 10
    max_events_per_batch: int = 1000
    max_checkpoint_bytes: int = 32 << 20
    max_writes_per_call: int = 1000
    max_page_size: int = 1000
    max_error_bytes: int = 16 << 10
    # All events of one AppendEvents, ParkTurn or FinishTurn together.
    max_batch_bytes: int = 8 << 20
    # ListCheckpoints' metadata filter.
    max_filter_bytes: int = 64 << 10
    # Short strings that are not ids: event types, serializer type tags, channels.
    max_name_length: int = 256
    # gRPC's own cap on one message, both directions (app.py sets it on the server).
    # It must leave headroom over the largest checkpoint the limits accept.
    max_message_bytes: int = 64 << 20
    # Open WatchTurn streams per client: per token when authentication is on, else
    # per peer address. Past it: RESOURCE_EXHAUSTED.
    max_watch_streams_per_client: int = 256
    # Open CheckpointStreams per client (RemoteSaver keeps at most 64 per saver and
    # event loop, one per run).
    max_checkpoint_streams_per_client: int = 256

    def __post_init__(self) -> None:
        if self.max_message_bytes <= self.max_checkpoint_bytes:
            raise ValueError(
                "max_message_bytes must be larger than max_checkpoint_bytes, "
                "or a checkpoint the limits accept could never arrive"
            )


DEFAULT_LIMITS = Limits()


def check_id(name: str, value: str, limits: Limits = DEFAULT_LIMITS) -> str:
    if not value:
        raise InvalidArgument(f"{name} is required")
    if len(value) > limits.max_id_length:
        raise InvalidArgument(
            f"{name} is {len(value)} characters; the limit is {limits.max_id_length}"
        )
    pattern, allowed = _PATTERNS.get(name, (_ID, "[A-Za-z0-9._:@/+=-]"))
    if not pattern.match(value):
        raise InvalidArgument(f"{name} {value[:64]!r} has characters outside {allowed}")
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


def _no_constant(token: str) -> Any:
    raise ValueError(f"{token} is not JSON (RFC 8259 has no NaN or Infinity)")


# One strict decoder for every call: json.loads with a keyword argument builds a new
# JSONDecoder each time, which showed in the profile of event ingest (bench/ingest.py).
_STRICT_JSON = json.JSONDecoder(parse_constant=_no_constant)
# Its scanner (C): (value, end) for the JSON value starting at an index.
_SCAN: Any = _STRICT_JSON.scan_once  # type: ignore[attr-defined]  # not in typeshed


def _python_json(text: str) -> Any:
    # The decoder's scanner on its own, as JSONDecoder.decode runs it when the text
    # starts with a value, without decode's two whitespace matches; any text it does
    # not take whole (leading or trailing whitespace, extra data, not JSON) goes
    # through decode, which accepts or refuses it.
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        end = -1
    if end != len(text):
        value = _STRICT_JSON.decode(text)
    return value


def check_json_text(
    name: str, text: str, limit: int, max_depth: int = DEFAULT_LIMITS.max_json_depth
) -> Any:
    """Refuse text over `limit` bytes, that is not strict JSON, or nested deeper than
    `max_depth`; returns the parsed value (an integer past 64 bits as a float)."""
    # UTF-8 takes at most 4 bytes per code point: encode only text that may be over.
    if len(text) * 4 > limit:
        check_size(name, len(text.encode()), limit)
    try:
        # orjson (C) takes what is valid JSON, and refuses NaN and Infinity as the
        # strict decoder does. What it refuses goes through the Python decoder, which
        # decides and words the refusal as before; that also keeps accepting the
        # valid JSON orjson does not take (integers past 64 bits, lone surrogates).
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            value = _python_json(text)
    except RecursionError:
        # The parser's own recursion guard: far deeper than any depth limit.
        raise InvalidArgument(f"{name} is nested deeper than {max_depth} levels") from None
    except ValueError as exc:
        raise InvalidArgument(f"{name} is not valid JSON: {exc}") from None
    # Nesting is at most one level per opening bracket: walk the value only when the
    # text has enough of them to break the limit (event data is mostly flat, and the
    # walk was a tenth of the event loop's time in bench/ingest.py).
    if text.count("{") + text.count("[") >= max_depth:
        check_depth(name, value, max_depth)
    return value


def page_size(requested: int, default: int, limits: Limits = DEFAULT_LIMITS) -> int:
    if requested < 0:
        raise InvalidArgument("page_size must not be negative")
    if requested > limits.max_page_size:
        raise InvalidArgument(f"page_size {requested} is over the limit of {limits.max_page_size}")
    return requested or default


# A row id as SQLite and PostgreSQL store it (a signed 64-bit integer).
_MAX_ROW_ID = (1 << 63) - 1


def check_seq(name: str, value: int) -> int:
    """A sequence number a client sends back (Last-Event-ID): what the store can
    hold, a signed 64-bit integer, and not negative."""
    if not 0 <= value <= _MAX_ROW_ID:
        raise InvalidArgument(f"{name} must be a whole number from 0 to {_MAX_ROW_ID}")
    return value


def page_position(value: int) -> int:
    """A row id decoded from a page token: one this service could have issued (1 to
    2**63-1), else INVALID_ARGUMENT. Past 64 bits a store answers OverflowError."""
    if not 0 < value <= _MAX_ROW_ID:
        raise InvalidArgument("page_token is not one this service issued")
    return value


def check_length(name: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise InvalidArgument(f"{name} is {len(value)} characters; the limit is {limit}")
    return value


class StreamQuota:
    """Open streams per client key; past `limit`, RESOURCE_EXHAUSTED.

    Used on the event loop only (no lock needed): `hold` is entered and left by
    the RPC's own task.
    """

    def __init__(self, what: str, limit: int, setting: str) -> None:
        self.what = what
        self.limit = limit
        self.setting = setting
        self._open: Counter[str] = Counter()

    def open(self, key: str) -> int:
        return self._open[key]

    @contextlib.contextmanager
    def hold(self, key: str) -> Iterator[None]:
        if self._open[key] >= self.limit:
            raise ResourceExhausted(
                f"{self._open[key]} {self.what} already open for this client; "
                f"the limit is {self.limit} ({self.setting})"
            )
        self._open[key] += 1
        try:
            yield
        finally:
            self._open[key] -= 1
            if not self._open[key]:
                del self._open[key]
