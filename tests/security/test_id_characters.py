"""Ids refuse characters that forge what a reader sees (decision 188): line and
paragraph separators, and bidi controls that reorder a log line or a page."""

from __future__ import annotations

import pytest
from turnkeeper_server import limits
from turnkeeper_server.errors import InvalidArgument

FORGING = [
    "\u2028",
    "\u2029",
    *map(chr, range(0x202A, 0x202F)),
    *map(chr, range(0x2066, 0x206A)),
    "\u200e",
    "\u200f",
    "\u061c",
    "\x85",
]


@pytest.mark.parametrize("char", FORGING, ids=lambda c: f"U+{ord(c):04X}")
def test_thread_ids_refuse_separators_and_bidi_controls(char: str) -> None:
    with pytest.raises(InvalidArgument, match="thread_id"):
        limits.check_id("thread_id", f"thread{char}evil")


def test_thread_ids_keep_any_other_printable_text() -> None:
    for value in ("th-1", "Thread with spaces", "日本語のスレッド", "emoji 🧵", "ÿ-é"):
        assert limits.check_id("thread_id", value) == value
