"""`turnkeeper agent`'s runs share one checkpoint stream per event loop unless
TURNKEEPER_SAVER_SHARE_STREAM=0 (decision 600); a value it cannot read is refused,
saying what it takes. RemoteSaver's own default, outside the host, is unchanged.
No service: the bridges are built, not started."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

import pytest
from langgraph.graph import END, START, StateGraph
from turnkeeper.agent.bridge import Bridge
from turnkeeper.agent.host._config import read_config
from turnkeeper.agent.host._run import bridge_configs
from turnkeeper.agent.saver import SHARE_ENV, RemoteSaver


class State(TypedDict):
    n: int


def _graph() -> StateGraph[State]:
    builder = StateGraph(State)
    builder.add_node("one", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "one")
    builder.add_edge("one", END)
    return builder


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "langgraph.json"
    path.write_text(json.dumps({"graphs": {"a": "./a.py:graph", "b": "./b.py:graph"}}))
    return path


BASE = {"NATS_URL": "nats://127.0.0.1:1", "TURNKEEPER_ADDRESS": "127.0.0.1:1"}


@pytest.mark.parametrize(
    ("value", "shared"),
    [(None, True), ("1", True), ("on", True), ("0", False), (" OFF ", False), ("false", False)],
)
async def test_the_hosts_runs_share_one_stream_unless_the_variable_says_0(
    tmp_path: Path, value: str | None, shared: bool
) -> None:
    env = BASE if value is None else {**BASE, SHARE_ENV: value}
    configs = bridge_configs(read_config(_config(tmp_path)), env)
    assert [c.share_stream for c in configs] == [shared, shared]
    bridge = Bridge(_graph(), configs[0])
    try:
        assert bridge.saver._channels.shared is shared
    finally:
        await bridge.saver.aclose()


def test_a_value_the_host_cannot_read_is_refused_saying_what_it_takes(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"TURNKEEPER_SAVER_SHARE_STREAM='maybe': 1 .* or 0"):
        bridge_configs(read_config(_config(tmp_path)), {**BASE, SHARE_ENV: "maybe"})


def test_outside_the_host_a_saver_still_streams_per_run_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(SHARE_ENV, raising=False)
    assert RemoteSaver("127.0.0.1:1")._channels.shared is False
    monkeypatch.setenv(SHARE_ENV, "1")
    assert RemoteSaver("127.0.0.1:1")._channels.shared is True
