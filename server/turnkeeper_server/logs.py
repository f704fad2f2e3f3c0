"""Log lines about a turn, and the two log formats of `turnkeeper serve`.

Every line about a turn carries its turn_id and attempt, both in the text (as a
`turn_id=<id> attempt=<n> ` prefix, so grep works on plain logs) and as record
attributes (so the JSON format emits them as fields):

    turn_log(log, turn.turn_id, turn.attempts).info("parked")

`--log-format json` writes one JSON object per line: ts, level, logger, msg, and
turn_id/attempt when the line is about a turn.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import MutableMapping
from typing import Any, Final

FORMATS: Final = ("text", "json")
TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s %(message)s"


class TurnLogger(logging.LoggerAdapter[logging.Logger]):
    """A logger for one turn (and one of its attempts)."""

    def __init__(self, logger: logging.Logger, turn_id: str, attempt: int) -> None:
        super().__init__(logger, {"turn_id": turn_id, "attempt": attempt})
        # The prefix becomes part of the format string: escape a literal '%'.
        self._prefix = f"turn_id={turn_id} attempt={attempt} ".replace("%", "%%")

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return self._prefix + str(msg), kwargs


def turn_log(logger: logging.Logger, turn_id: str, attempt: int) -> TurnLogger:
    return TurnLogger(logger, turn_id, attempt)


class JsonFormatter(logging.Formatter):
    """One JSON object per line; turn_id and attempt as fields, not in msg."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
        }
        turn_id = getattr(record, "turn_id", None)
        attempt = getattr(record, "attempt", None)
        if turn_id is not None:
            entry["turn_id"] = turn_id
            entry["attempt"] = attempt
            message = message.removeprefix(f"turn_id={turn_id} attempt={attempt} ")
        entry["msg"] = message
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Root logging for `turnkeeper serve`: stderr, in `fmt` (text or json)."""
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler])
