"""What an effect raises when it does not call its function."""

from __future__ import annotations

from typing import Any


class EffectError(Exception):
    """Base of the effect API's own errors."""


class EffectFailed(EffectError):
    """The call failed in an earlier execution and its error is recorded: re-raised
    without calling the function again. The first execution raised the function's
    own exception; every later one raises this, with that exception's type name and
    message."""

    def __init__(self, name: str, key: str, error: dict[str, Any]) -> None:
        self.name, self.key = name, key
        self.error_type = str(error.get("type", ""))
        self.error_message = str(error.get("message", ""))
        super().__init__(
            f"effect {name!r} (key {key}) failed in an earlier execution and is not "
            f"called again: {self.error_type}: {self.error_message}"
        )


class EffectUncertain(EffectError):
    """An earlier execution began the call and died before its outcome was recorded,
    and the effect's policy is `fail`: the turn fails, naming the effect."""

    def __init__(self, name: str, key: str, args: Any) -> None:
        self.name, self.key, self.args = name, key, args
        super().__init__(
            f"effect {name!r} (key {key}) may or may not have happened: an earlier "
            f"execution began it with arguments {args} and died before its outcome "
            "was recorded (policy 'fail'); check the receiver for this key"
        )


class EffectOutsideRemoteSaver(EffectError):
    """The graph runs in a turn but not with RemoteSaver: there is no ledger."""
