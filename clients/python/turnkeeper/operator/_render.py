"""How the `turnkeeper` CLI shows turns and events: plain dicts for `--json`, and
aligned text for people.

The JSON shape is the CLI's own, made for scripts: snake_case names, the state as
a bare word (``RUNNING``), int64s as numbers, JSON payloads (input, interrupt,
resume, event data) as JSON values rather than text, times as RFC 3339 UTC.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC
from typing import Any, Final

from google.protobuf import struct_pb2, timestamp_pb2

from turnkeeper._values import py_to_value, value_to_py
from turnkeeper.v1 import turns_pb2

STATE_PREFIX: Final = "TURN_STATE_"
# Event data longer than this is cut in the human view (`--json` has it all).
DATA_WIDTH: Final = 100


def state_name(state: int) -> str:
    return turns_pb2.TurnState.Name(state).removeprefix(STATE_PREFIX)  # type: ignore[arg-type]


def time_text(ts: timestamp_pb2.Timestamp) -> str | None:
    if ts.seconds == 0 and ts.nanos == 0:
        return None
    moment = ts.ToDatetime(tzinfo=UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def value_of(obj: Any) -> struct_pb2.Value:
    """A JSON value (as json.loads gives it) as a google.protobuf.Value."""
    return py_to_value(obj)


def _value(value: struct_pb2.Value, present: bool = True) -> Any:
    # Whole numbers as ints: a Value holds every number as a double.
    return value_to_py(value) if present else None


def _json_text(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


def turn_dict(turn: turns_pb2.Turn) -> dict[str, Any]:
    owner = None
    if turn.HasField("owner"):
        owner = {
            "replica": turn.owner.replica,
            "incarnation": turn.owner.incarnation,
            "lease_expires_at": time_text(turn.owner.lease_expires_at),
        }
    return {
        "turn_id": turn.turn_id,
        "thread_id": turn.thread_id,
        "agent": turn.agent,
        "state": state_name(turn.state),
        "attempts": turn.attempts,
        "last_seq": turn.last_seq,
        "rewinds": turn.rewinds,
        "owner": owner,
        "input": _value(turn.input, turn.HasField("input")),
        "interrupt": _value(turn.interrupt, turn.HasField("interrupt")),
        "resume": _value(turn.resume, turn.has_resume),
        "has_resume": turn.has_resume,
        "error": turn.error,
        "created_at": time_text(turn.created_at),
        "updated_at": time_text(turn.updated_at),
        # Only when the service ended the turn (cancel, a deadline): why.
        **({"end_reason": turn.end_reason} if turn.end_reason else {}),
        **({"detail": turn.detail} if turn.detail else {}),
        # The graph version that last ran it, and the one it waits for (docs/versions.md).
        **({"graph": _version(turn.graph)} if turn.graph.fingerprint else {}),
        **({"waiting_for": _version(turn.waiting_for)} if turn.waiting_for.fingerprint else {}),
    }


def _version(ref: turns_pb2.GraphVersionRef) -> dict[str, str]:
    return {"fingerprint": ref.fingerprint, "label": ref.label}


def event_dict(event: turns_pb2.Event) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "attempt": event.attempt,
        "type": event.type,
        "data": _json_text(event.data_json),
        "created_at": time_text(event.created_at),
    }


def _enum_word(name: str, prefix: str) -> str:
    return name.removeprefix(prefix)


def effect_dict(effect: turns_pb2.Effect) -> dict[str, Any]:
    return {
        "key": effect.key,
        "name": effect.name,
        "state": _enum_word(turns_pb2.EffectState.Name(effect.state), "EFFECT_STATE_"),
        "policy": _enum_word(turns_pb2.EffectPolicy.Name(effect.policy), "EFFECT_POLICY_").lower(),
        "args": _json_text(effect.args_json),
        "outcome": _json_text(effect.outcome_json) if effect.outcome_json else None,
        "attempt": effect.attempt,
        "task_id": effect.task_id,
        "call_index": effect.call_index,
        "detail": effect.detail,
        "created_at": time_text(effect.created_at),
        "updated_at": time_text(effect.updated_at),
    }


def reset_dict(reset: turns_pb2.Reset) -> dict[str, Any]:
    return {"seq": reset.seq, "attempt": reset.attempt, "checkpoint_id": reset.checkpoint_id}


def status_dict(status: turns_pb2.TurnStatusResponse) -> dict[str, Any]:
    return {
        "turn_id": status.turn_id,
        "state": state_name(status.state),
        "attempts": status.attempts,
        "last_seq": status.last_seq,
        "error": status.error,
        **({"end_reason": status.end_reason} if status.end_reason else {}),
        # Why nobody runs the turn, when the service knows (an agent never announced).
        **({"detail": status.detail} if status.detail else {}),
        **({"waiting_for": _version(status.waiting_for)} if status.waiting_for.fingerprint else {}),
    }


def redriven_dict(redriven: turns_pb2.RedrivenTurn) -> dict[str, Any]:
    return {
        "turn": turn_dict(redriven.turn),
        "checkpoint_id": redriven.checkpoint_id,
        "rewind_seq": redriven.rewind_seq,
        "failed_at_cap": redriven.failed_at_cap,
    }


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def compact(obj: Any, width: int | None = None) -> str:
    text = obj if isinstance(obj, str) else dumps(obj)
    if width is not None and len(text) > width:
        return text[: width - 1] + "…"
    return text


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns left-aligned to their widest cell; the last column is not padded."""
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    lines = []
    for cells in (headers, *rows):
        padded = [c.ljust(w) for c, w in zip(cells[:-1], widths[:-1], strict=True)]
        lines.append("  ".join([*padded, cells[-1]]).rstrip())
    return "\n".join(lines)


TURN_COLUMNS: Final = ("TURN", "THREAD", "AGENT", "STATE", "ATTEMPTS", "SEQ", "UPDATED", "ERROR")


def turn_row(turn: turns_pb2.Turn) -> list[str]:
    return [
        turn.turn_id,
        turn.thread_id,
        turn.agent,
        state_name(turn.state),
        str(turn.attempts),
        str(turn.last_seq),
        time_text(turn.updated_at) or "-",
        compact(turn.error, 60) if turn.error else "",
    ]


EVENT_COLUMNS: Final = ("SEQ", "ATTEMPT", "TYPE", "DATA")


def event_row(event: turns_pb2.Event) -> list[str]:
    data = _json_text(event.data_json)
    return [str(event.seq), str(event.attempt), event.type, compact(data, DATA_WIDTH)]


EFFECT_COLUMNS: Final = ("KEY", "NAME", "STATE", "POLICY", "ATTEMPT", "ARGS", "OUTCOME")


def effect_row(effect: turns_pb2.Effect) -> list[str]:
    shown = effect_dict(effect)
    outcome = (
        shown["detail"]
        if effect.state == turns_pb2.EFFECT_STATE_SUPERSEDED
        else (compact(shown["outcome"], DATA_WIDTH // 2) if shown["outcome"] is not None else "-")
    )
    return [
        effect.key,
        effect.name,
        shown["state"],
        shown["policy"],
        str(effect.attempt),
        compact(shown["args"], DATA_WIDTH // 2),
        outcome,
    ]


def event_line(event: turns_pb2.Event) -> str:
    """One streamed event, for `turns watch`."""
    data = compact(_json_text(event.data_json), DATA_WIDTH)
    return f"{event.seq:>5}  attempt {event.attempt}  {event.type}  {data}"


def reset_line(reset: turns_pb2.Reset) -> str:
    checkpoint = reset.checkpoint_id or "none"
    return (
        f"----- RESET: rewound to seq {reset.seq} (attempt {reset.attempt}, "
        f"checkpoint {checkpoint}); drop what was shown, the retained events follow -----"
    )


def turn_record(turn: turns_pb2.Turn) -> str:
    """The record of one turn as `key: value` lines, for `turns show`."""
    d = turn_dict(turn)
    owner = d["owner"]
    lines = [
        ("turn", d["turn_id"]),
        ("thread", d["thread_id"]),
        ("agent", d["agent"]),
        ("state", d["state"]),
        ("attempts", str(d["attempts"])),
        ("last seq", str(d["last_seq"])),
        ("rewinds", str(d["rewinds"])),
        (
            "owner",
            f"{owner['replica']}/{owner['incarnation']} (lease until "
            f"{owner['lease_expires_at'] or '-'})"
            if owner
            else "none",
        ),
        ("input", compact(d["input"])),
    ]
    if d["interrupt"] is not None:
        lines.append(("interrupt", compact(d["interrupt"])))
    if d["has_resume"]:
        lines.append(("resume", compact(d["resume"])))
    if d["error"]:
        lines.append(("error", d["error"]))
    if d.get("end_reason"):
        lines.append(("ended by", d["end_reason"]))
    if d.get("detail"):
        lines.append(("waiting", d["detail"]))
    if d.get("graph"):
        graph = d["graph"]
        label = f' (label "{graph["label"]}")' if graph["label"] else ""
        lines.append(("graph", f"{graph['fingerprint'][:12]}{label}"))
    lines += [("created", d["created_at"] or "-"), ("updated", d["updated_at"] or "-")]
    width = max(len(k) for k, _ in lines) + 1
    return "\n".join(f"{(k + ':').ljust(width)} {v}" for k, v in lines)
